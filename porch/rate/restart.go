package rate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// What survives a restart (SQLite): New loads the open windows back, and
// Close leaves exact counts behind.

// load fills the views with the counters of still-open windows. It runs
// before any actor can see the views; handing a job to an actor through its
// mailbox publishes them.
func (l *Limiter) load(ctx context.Context) error {
	l.views = make([]*view, l.pool.Size())
	for i := range l.views {
		l.views[i] = newView(i)
	}
	now := l.exclusive.Now()
	err := l.exclusive.LoadCounters(ctx, now, func(c store.Counter) {
		if !strings.HasPrefix(c.Key, l.prefix) {
			return // another limiter's row
		}
		start := resumedStart(c, l.window, now)
		v := l.views[l.pool.Shard(c.Key)]
		v.counts[c.Key] = tally{start: start, count: c.Count, durable: c.Count}
		v.expiry = append(v.expiry, opened{key: c.Key, start: start})
	})
	if err != nil {
		return fmt.Errorf("rate: %w", err)
	}
	for _, v := range l.views {
		sortOpened(v.expiry)
		v.peak = len(v.counts)
		l.armForget(v, now) // no actor runs a job yet, so touching v here is safe
	}
	return nil
}

// resumedStart is where a loaded window starts under this limiter's window
// length. A window opened under another length (the policy changed in a
// deploy) keeps its count and closes at its old end or one new window from
// now, whichever is sooner: so a client is never held longer than either
// policy would hold it, and its hits are not forgotten. Every window of a
// limiter then has one length, which the views rely on.
func resumedStart(c store.Counter, window time.Duration, now time.Time) time.Time {
	if c.Window == window {
		return c.WindowStart
	}
	end := c.End()
	if limit := now.Add(window); limit.Before(end) {
		end = limit
	}
	return end.Add(-window)
}

// Close writes the exact count of every open window that was written ahead
// (see Options.WriteAhead), so that a clean shutdown leaves exact counts in
// the store, and frees the limiter's Name for another policy. Call it after
// the server has drained and before the pool and the store close; porch.App
// runs closers in that order when the limiter is registered after them. It
// returns the first write error, or ctx.Err().
func (l *Limiter) Close(ctx context.Context) error {
	// The policy's name is free for another limiter once this one is done
	// counting, whether or not its flush finishes in time.
	defer l.release()
	if l.exclusive == nil {
		return nil // a shared store is written exactly on every hit
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // protects first
		first error
	)
	record := func(err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}
	for shard := range l.views {
		wg.Add(1)
		err := l.pool.SendShard(shard, true, func(i int) {
			defer wg.Done()
			if t := l.views[i].timer; t != nil {
				t.Stop()
			}
			now := l.exclusive.Now()
			for key, w := range l.views[i].counts {
				if w.written() <= w.count || !now.Before(w.start.Add(l.window)) {
					continue
				}
				wg.Add(1)
				c := store.Counter{Key: key, WindowStart: w.start, Window: l.window, Count: w.count}
				err := l.exclusive.SaveCounter(c, func(err error) { record(err); wg.Done() })
				if err != nil {
					record(err)
					wg.Done()
					continue
				}
				w.durable, w.pending, w.pendingAt = w.count, nil, 0
				l.views[i].counts[key] = w
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
		return first
	case <-ctx.Done():
		return ctx.Err()
	}
}
