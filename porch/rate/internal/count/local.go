package count

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// local counts in the memory of the keys' actors, for a store that is its
// counters' only writer (SQLite). Each actor keeps a view of its keys'
// states and decides alone; the store's rows exist to rebuild the views
// after a restart, so a hit's verdict waits only until a committed write
// covers its count (see bound.go). Open loads the views; Close leaves exact
// counts behind.
type local struct {
	Config
	st     driver.ExclusiveCounters
	prefix string  // the limiter's counter keys', to load its own rows only
	ahead  int64   // how far a stored count may run ahead; 0 writes every hit
	views  []*view // indexed by pool shard; views[i] is touched only by actor i
	// waiters are the answers of hits that wait for a write (see
	// boundWrite), reused.
	waiters sync.Pool
}

var _ Counter = (*local)(nil)

// NewLocal is the Counter on a store that is its counters' only writer:
// the counts of the keys under prefix, kept in the actors' memory, with
// their stored counts allowed to run up to ahead hits ahead (0: every hit
// written exactly; see rate.Options.WriteAhead).
func NewLocal(cf Config, st driver.ExclusiveCounters, prefix string, ahead int64) Counter {
	c := &local{Config: cf, st: st, prefix: prefix, ahead: ahead, views: make([]*view, cf.Pool.Size())}
	for i := range c.views {
		c.views[i] = newView(i)
	}
	c.waiters.New = func() any { return &waiter{pool: &c.waiters} }
	return c
}

// Hit runs on key's actor. The verdict is sent once the store holds a
// count at least this hit's: at once when a committed write already covers
// it, after the queued write that covers it commits, or after a new write
// (see nextBound) commits. A hot key (see hot) queues its next write while
// half its margin is left, so its hits seldom wait for a commit at all.
func (c *local) Hit(shard int, key string, n int64, to Replier) {
	v := c.views[shard]
	now := c.st.Now()
	v.forget(now, c.Rule.Life(), forgetPerHit)
	w, s := c.advance(v, key, now)
	if room := c.Rule.Room(s, now); n > room {
		// Nothing changes, so nothing is written; a refusal never lets a
		// request through, so it need not wait for earlier writes.
		to.Reply(c.verdict(s, now, c.st.Wall(), false, n, room), w.start, nil)
		return
	}
	w.count += n
	s.Count = w.count
	room := c.Rule.Room(s, now)
	verdict := c.verdict(s, now, c.st.Wall(), true, n, room)
	// The highest count the store may hold for this epoch: what the state
	// could still admit now. Writing further ahead would refuse, after a
	// crash, requests no policy refuses.
	most := w.count + max(room, 0)
	if w.pending != nil {
		if durable, failed := w.pending.state(); durable {
			w.durable, w.pending, w.pendingAt = max(w.durable, w.pendingAt), nil, 0
		} else if failed {
			w.pending, w.pendingAt = nil, 0 // its waiters got the error; write again
		}
	}
	switch {
	case w.count <= w.durable:
		to.Reply(verdict, w.start, nil) // the common case: no write, no wait
		if c.hot(w, most) {
			c.writeAhead(key, &w, most, nil)
		}
	case w.pending != nil && w.count <= w.pendingAt:
		w.pending.wait(c.waiter(to, verdict, w.start))
	default:
		c.writeAhead(key, &w, most, c.waiter(to, verdict, w.start))
	}
	v.counts[key] = w
}

// waiter is the answer v, for the hit counted in the epoch started at
// start, that to hears once the write it waits for settles.
func (c *local) waiter(to Replier, v Verdict, start time.Time) *waiter {
	w := c.waiters.Get().(*waiter)
	w.to, w.v, w.start = to, v, start
	return w
}

// advance brings key's tally to now under the limiter's rule: a state the
// rule moves to a new epoch (a closed window, an idle bucket) gets a new
// tally, which nothing written covers yet. It returns the tally and its
// state.
func (c *local) advance(v *view, key string, now time.Time) (tally, driver.State) {
	w, ok := v.counts[key]
	s := c.Rule.Advance(w.state(), now)
	if !ok || !s.Start.Equal(w.start) {
		old := w
		w = v.open(key, s)
		if _, carries := c.Rule.Carried(old.start, 0, w.start); ok && carries {
			c.carry(old, &w)
			v.counts[key] = w
		}
		c.armForget(v, now)
	}
	return w, s
}

// carry lets a new epoch w of an algorithm whose epochs carry over (a
// bucket's: see algorithm.Rule.Carried) inherit what its key's old tally
// had written: after a crash the store loads the old epoch's newest row
// as the key's state, which covers as many of the new epoch's counts as
// the rule says.
//
// The committed bound carries into w.durable, the queued one into
// w.pending and w.pendingAt (its waiters answer when it settles; if it
// fails, the committed one is the store's newest again). Every later write
// of w goes above what w carried (see writeAhead), so no row that covered
// an answered hit is superseded by one that covers less.
//
// Without this a key whose rate is far under its limit finds its bucket
// empty at nearly every hit, opens a new epoch, and writes that epoch's
// first count exactly: about one write per hit. The streak lets the
// margin grow across such epochs as it grows within a window.
func (c *local) carry(old tally, w *tally) {
	w.streak = min(old.streak+old.count, c.ahead)
	if old.pending != nil {
		if durable, failed := old.pending.state(); durable {
			old.durable, old.pending, old.pendingAt = max(old.durable, old.pendingAt), nil, 0
		} else if failed {
			old.pending, old.pendingAt = nil, 0
		}
	}
	covered := func(bound int64) int64 {
		n, _ := c.Rule.Carried(old.start, bound, w.start)
		return n
	}
	w.durable = covered(old.durable)
	if at := covered(old.pendingAt); old.pending != nil && at > w.durable {
		w.pending, w.pendingAt = old.pending, at
	}
}

// Peek runs on key's actor: the key's state as its next hit would find it.
func (c *local) Peek(shard int, key string, answer func(Verdict, error)) {
	now := c.st.Now()
	w := c.views[shard].counts[key]
	s := c.Rule.Advance(w.state(), now)
	answer(c.peeked(s, now, c.st.Wall()), nil)
}

// Reset runs on key's actor. It opens a new, empty epoch in place of the
// key's live one and writes it through as the key's newest row; answer
// waits for that write.
//
// The store's committer writes in the order writes were queued, and the
// journal's newest row of a key wins, so a bound queued before the reset
// (written ahead, or one an earlier hit waits for) commits before the
// reset's row or is superseded by it in the same batch: it cannot bring the
// old count back. The new tally forgets that bound: hits after the reset
// wait for writes of their own, queued after the reset's, never for a
// bound of the old epoch.
func (c *local) Reset(shard int, key string, answer func(error)) {
	v := c.views[shard]
	now := c.st.Now()
	w, ok := v.counts[key]
	if !ok || !now.Before(c.Rule.Expires(w.state())) {
		answer(nil) // nothing held back, here or in the store
		return
	}
	// The new epoch must not start where the old one did: a take-back
	// (see Set) finds its epoch by the start alone, and one for a hit
	// this reset clears must not come out of a hit counted after it. Only
	// a clock that has not moved since the epoch opened (a fake or a
	// coarse one) needs the nanosecond, which ends the epoch that much
	// later: the safe side.
	start := now
	if !start.After(w.start) {
		start = w.start.Add(time.Nanosecond)
	}
	w = v.open(key, driver.State{Start: start})
	c.armForget(v, now)
	bw := new(boundWrite)
	bw.wait(c.waiter(replyFunc(answer), Verdict{}, time.Time{}))
	w.pending = bw // pendingAt 0: the new epoch's count, written
	v.counts[key] = w
	if err := c.st.SaveCounter(c.counter(key, w, 0), bw.settle); err != nil {
		bw.settle(err)
	}
}

// TakeBack runs on key's actor: it lowers key's count by n if key's epoch
// is still the one that started at start. One that has ended since took
// its hits with it. Only the in-memory count goes down; the stored one,
// already at or above it, is left to the next write, as a write-ahead
// bound is: a crash before then over-counts by n, the safe side.
func (c *local) TakeBack(shard int, key string, start time.Time, n int64) {
	v := c.views[shard]
	w, ok := v.counts[key]
	if !ok || !w.start.Equal(start) {
		return
	}
	w.count = max(w.count-n, 0)
	v.counts[key] = w
}

// counter is the row that makes count durable for key's tally w, in the
// algorithm's form (see algorithm.Rule.Row).
func (c *local) counter(key string, w tally, count int64) driver.Counter {
	return c.Rule.Row(key, w.state(), count)
}

// Open fills the views with the states still live in the store. It runs
// before any actor can see the views; handing a job to an actor through
// its mailbox publishes them.
func (c *local) Open(ctx context.Context) error {
	now := c.st.Now()
	err := c.st.LoadCounters(ctx, now, func(sc driver.Counter) {
		if !strings.HasPrefix(sc.Key, c.prefix) {
			return // another limiter's row
		}
		s := c.Rule.Resume(sc, now)
		v := c.views[c.Pool.Shard(sc.Key)]
		v.counts[sc.Key] = tally{start: s.Start, count: s.Count, prev: s.Prev, durable: s.Count}
		v.expiry = append(v.expiry, opened{key: sc.Key, start: s.Start})
	})
	if err != nil {
		return fmt.Errorf("rate: %w", err)
	}
	for _, v := range c.views {
		sortOpened(v.expiry)
		v.peak = len(v.counts)
		c.armForget(v, now) // no actor runs a job of v yet: only its timer, started last
	}
	return nil
}

// Close writes the exact count of every live state that was written ahead
// (see rate.Options.WriteAhead), so that a clean shutdown leaves exact
// counts in the store. It returns the first write error, or ctx.Err().
func (c *local) Close(ctx context.Context) error {
	var (
		wg    sync.WaitGroup
		first firstError
	)
	record := first.record
	for shard := range c.views {
		wg.Add(1)
		err := c.Pool.SendShard(shard, true, func(i int) {
			defer wg.Done()
			v := c.views[i]
			if t := v.timer; t != nil {
				t.Stop()
			}
			now := c.st.Now()
			for key, w := range v.counts {
				if w.written() <= w.count || !now.Before(c.Rule.Expires(w.state())) {
					continue
				}
				wg.Add(1)
				err := c.st.SaveCounter(c.counter(key, w, w.count), func(err error) { record(err); wg.Done() })
				if err != nil {
					record(err)
					wg.Done()
					continue
				}
				w.durable, w.pending, w.pendingAt = w.count, nil, 0
				v.counts[key] = w
			}
		})
		if err != nil {
			record(fmt.Errorf("rate: flush shard %d: %w", shard, err))
			wg.Done()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return first.get()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hot reports whether a hit answered from the committed bound should queue
// the next bound now, before any hit has to wait for it: only for a key that
// has already had ahead/2 hits in this epoch (or in its streak of epochs,
// for an algorithm whose epochs carry over) and has less than half its
// margin left. A queued write no request waits on is not bounded by the
// number of connections, so doing this for every key would let a crowd of
// cool keys pile writes up in the committer's queue, and every first hit
// would wait behind them.
func (c *local) hot(w tally, most int64) bool {
	ahead := c.ahead
	return w.pending == nil && w.durable < most && w.count+w.streak >= ahead/2 && w.durable-w.count < ahead/2 &&
		nextBound(w.count, w.count+w.streak, ahead, most) > w.durable
}

// writeAhead queues the write of key's next bound, at most most, and
// records it as pending; h, if not nil, waits for it.
func (c *local) writeAhead(key string, w *tally, most int64, h *waiter) {
	bw := new(boundWrite)
	if h != nil {
		bw.wait(h)
	}
	// The margin grows with the hits seen, this epoch's and, where epochs
	// carry over, its streak's; the bound stays above what the tally already has
	// written (a carried bound included; see carry).
	w.pending, w.pendingAt = bw, max(nextBound(w.count, w.count+w.streak, c.ahead, most), w.written())
	if err := c.st.SaveCounter(c.counter(key, *w, w.pendingAt), bw.settle); err != nil {
		bw.settle(err)
	}
}

// armForget runs on v's actor: unless armed already, it sets v's timer to
// send the actor a forget job when v's oldest state ends. Hits let go of
// a few ended states each; the timer is for an actor that gets no more
// hits, whose keys would otherwise stay in memory for good.
func (c *local) armForget(v *view, now time.Time) {
	end, ok := v.oldest(c.Rule.Life())
	if v.armed || !ok {
		return
	}
	v.armed = true
	wait := end.Sub(now) + time.Millisecond
	if v.timer == nil {
		// Made stopped and started by Reset once v.timer is set: a timer
		// started by AfterFunc could fire, and its job read v.timer on the
		// actor, before the assignment (Open arms it off the actor).
		t := time.AfterFunc(time.Hour, func() { c.forgetTick(v) })
		t.Stop()
		v.timer = t
	}
	v.timer.Reset(wait)
}

// forgetTick runs on v's timer: it hands v's actor a forget job, and tries
// again in a second while the mailbox is full (hits are forgetting
// meanwhile). After Close the pool refuses, and the ticking stops.
func (c *local) forgetTick(v *view) {
	err := c.Pool.SendShard(v.shard, false, func(int) {
		now := c.st.Now()
		v.forget(now, c.Rule.Life(), forgetPerTick)
		v.armed = false
		c.armForget(v, now)
	})
	if errors.Is(err, actor.ErrSaturated) {
		time.AfterFunc(time.Second, func() { c.forgetTick(v) })
	}
}
