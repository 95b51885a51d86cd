package memory

import (
	"container/heap"
	"time"
)

// sweepEach bounds the entries one timer-driven sweep drops before it lets
// go of the lock, so that a backlog is let go in steps between calls.
const sweepEach = 4096

// expireEach bounds the entries one write drops, as SQLite's commits prune
// a bounded number of rows: a write never pays for a whole backlog.
const expireEach = 64

// expiries is a min-heap of when entries may be forgotten. Each live entry
// has at most one item in it, at its queued time (see queue), so the heap
// grows with the live keys, not with the writes: a hot key written on
// every hit keeps one item.
type expiries []expiry

type expiry struct {
	at       time.Time
	key      string
	response bool // a response's entry, else a counter's
}

// shrinkFrom is the fewest entries a store must have held before shrink
// rebuilds its maps: below it the memory to win is not worth a copy.
const shrinkFrom = 1024

func (h expiries) Len() int           { return len(h) }
func (h expiries) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiries) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiries) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// queue makes sure an entry whose item is at queued (zero: none) will be
// looked at by end, and returns its item's time. An item already queued
// stays where it is: one at or before end is moved on when it comes up
// (see expire); one after it leaves the entry in memory that much longer,
// unread, since reads check the entry's own end.
func (h *expiries) queue(queued, end time.Time, key string, response bool) time.Time {
	if !queued.IsZero() {
		return queued
	}
	heap.Push(h, expiry{at: end, key: key, response: response})
	return end
}

// arm sets s's sweep to fire when the earliest queued entry may be let
// go, unless it is set to fire by then already. Writes drop a few
// entries each, but a store can go without writes for good while its
// limiters answer from memory (they write ahead, and a refusal writes
// nothing): the sweep is what lets a burst of keys go then. d.mu is held.
func (s *Store) arm(now time.Time) {
	if s.closed || len(s.d.expiry) == 0 {
		return
	}
	next := s.d.expiry[0].at
	if !s.sweepAt.IsZero() && !next.Before(s.sweepAt) {
		return
	}
	s.sweepAt = next
	// A millisecond late, so that the entry has ended when it fires.
	s.sweep.Reset(max(next.Sub(now), 0) + time.Millisecond)
}

// sweepTick runs on s's sweep timer: it lets go of up to sweepEach ended
// entries, and sets the timer again for the next.
func (s *Store) sweepTick() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return
	}
	s.sweepAt = time.Time{}
	now := s.Now()
	s.d.expireUpTo(now, sweepEach)
	s.arm(now)
}

// expire drops up to expireEach entries that ended by now. d.mu is held.
func (d *data) expire(now time.Time) { d.expireUpTo(now, expireEach) }

// expireUpTo drops up to n entries that ended by now. d.mu is held.
func (d *data) expireUpTo(now time.Time, n int) {
	defer d.shrink()
	for range n {
		if len(d.expiry) == 0 || d.expiry[0].at.After(now) {
			return
		}
		x := heap.Pop(&d.expiry).(expiry)
		if x.response {
			e := d.responses[x.key]
			switch {
			case e == nil || !e.queued.Equal(x.at):
				// Forgotten, or queued anew, since this item was pushed.
			case now.Before(e.r.Expires):
				e.queued = time.Time{}
				e.queued = d.expiry.queue(e.queued, e.r.Expires, x.key, true)
			default:
				delete(d.responses, x.key)
			}
			continue
		}
		e := d.counters[x.key]
		switch {
		case e == nil || !e.queued.Equal(x.at):
		case now.Before(e.c.End()):
			e.queued = time.Time{}
			e.queued = d.expiry.queue(e.queued, e.c.End(), x.key, false)
		default:
			delete(d.counters, x.key)
		}
	}
}

// shrink rebuilds the maps and the expiry queue, sized for what is left,
// once they hold a quarter of their peak, so that memory follows the live
// keys after a burst. Each entry is copied once per halving of the peak
// at most, which the writes that made the peak paid for. d.mu is held.
func (d *data) shrink() {
	live := len(d.counters) + len(d.responses)
	d.peak = max(d.peak, live)
	if d.peak < shrinkFrom || live >= d.peak/4 {
		return
	}
	counters := make(map[string]*counterEntry, len(d.counters))
	for k, e := range d.counters {
		counters[k] = e
	}
	responses := make(map[string]*responseEntry, len(d.responses))
	for k, e := range d.responses {
		responses[k] = e
	}
	d.counters, d.responses = counters, responses
	d.expiry = append(make(expiries, 0, len(d.expiry)), d.expiry...)
	d.peak = live
}
