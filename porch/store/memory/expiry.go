package memory

import (
	"container/heap"
	"time"
)

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

// expire drops up to expireEach entries that ended by now. d.mu is held.
func (d *data) expire(now time.Time) {
	for range expireEach {
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
