package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// Reset empties principal's window and starts it over: its next request
// counts from 0, with the full limit for a full window from now. Clear a
// login counter after a successful login with it. A principal with no open
// window is left alone (its next request opens one); on SQLite that costs
// no write, so resetting after every successful login is cheap.
//
// Reset is exact and durable as counting is. It returns once the reset is
// in the store, so a restart, even a kill -9 after Reset returned, does not
// bring the old count back. A request whose Allow returned before Reset was
// called is cleared by it; one sent after Reset returned is counted after
// it; one in flight meanwhile is counted either before (and cleared) or
// after, never lost halfway. Requests already waiting for their verdict
// still get it.
//
// It fails with ErrNoPrincipal for "", porch.ErrSaturated when the key's
// mailbox is full, the store's error when the write failed, and ctx.Err().
// After a failed write the count may already be cleared in this process but
// not in the store, where a restart would find it: call Reset again.
func (l *Limiter) Reset(ctx context.Context, principal string) error {
	if principal == "" {
		return ErrNoPrincipal
	}
	return l.reset(ctx, l.principalKey(principal))
}

// reset clears the counter key on its actor and waits until that is
// durable.
func (l *Limiter) reset(ctx context.Context, key string) error {
	reply := porch.NewReply[struct{}]()
	answer := func(err error) { reply.Send(struct{}{}, err) }
	err := l.pool.Send(key, func(shard int) {
		if l.exclusive != nil {
			l.resetView(l.views[shard], key, answer)
			return
		}
		if err := l.shared.ResetHit(key, answer); err != nil {
			answer(err)
		}
	})
	if err != nil {
		return err
	}
	_, err = reply.Wait(ctx)
	return err
}

// resetView runs on key's actor when the store is the counters' only
// writer. It opens a new, empty window in place of the key's open one and
// writes it through as the key's newest row; answer waits for that write.
//
// The store's committer writes in the order writes were queued, and the
// journal's newest row of a key wins, so a bound queued before the reset
// (written ahead, or one an earlier hit waits for) commits before the
// reset's row or is superseded by it in the same batch: it cannot bring the
// old count back. The new tally forgets that bound: hits after the reset
// wait for writes of their own, queued after the reset's, never for a
// bound of the old window.
func (l *Limiter) resetView(v *view, key string, answer func(error)) {
	now := l.exclusive.Now()
	w, ok := v.counts[key]
	if !ok || !now.Before(w.start.Add(l.window)) {
		answer(nil) // no open window, here or in the store
		return
	}
	// The new window must not start where the old one did: a take-back
	// (see Set) finds its window by the start alone, and one for a hit
	// this reset clears must not come out of a hit counted after it. Only
	// a clock that has not moved since the window opened (a fake or a
	// coarse one) needs the nanosecond, which closes the window that much
	// later: the safe side.
	start := now
	if !start.After(w.start) {
		start = w.start.Add(time.Nanosecond)
	}
	w = v.open(key, start)
	l.armForget(v, now)
	bw := new(boundWrite)
	bw.wait(answer)
	w.pending = bw // pendingAt 0: the new window's count, written
	v.counts[key] = w
	c := store.Counter{Key: key, WindowStart: start, Window: l.window}
	if err := l.exclusive.SaveCounter(c, bw.settle); err != nil {
		bw.settle(err)
	}
}
