package count

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
)

// This file gives a limiter's leases back to the shared store: an idle
// lease's hits each LeaseIdle (the sweeper, which Open starts), and every
// lease at Close, so that the store's counts are exact again.

// sweeper runs sweep on every shard each LeaseIdle, until close or until
// the pool has closed under it (a limiter never closed).
func (c *leases) sweeper() {
	defer close(c.swept)
	t := time.NewTicker(LeaseIdle)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			for shard := range c.shards {
				// A full mailbox skips a round: the next one comes.
				err := c.pool.SendShard(shard, false, func(i int) { c.sweep(i, time.Now()) })
				if errors.Is(err, actor.ErrClosed) {
					return
				}
			}
		}
	}
}

// sweep runs on shard's actor. A key idle since LeaseIdle before now gives
// its lease's hits back to the store, and settles its answered ones, and
// is forgotten, and so is a key whose trip for a lease seems lost; a lease
// past its until gives its hits back, while the store still counts them
// in their epoch or in one a reset started since (after the epoch's end
// only a reset can have kept them, and the store tells).
func (c *leases) sweep(shard int, now time.Time) {
	c.apply(shard)
	s := &c.shards[shard]
	for key, e := range s.m {
		if (e.tokens > 0 || e.adopted > 0) && !now.Before(e.until) {
			c.giveAllToStore(shard, key, e)
		}
		if e.asking || now.Sub(e.used) < LeaseIdle {
			continue
		}
		delete(s.m, key)
		c.giveAllToStore(shard, key, e)
		c.redo(shard, e)
	}
}

// Close gives every lease back (see giveAllBack), and then closes next;
// it returns the first error.
func (c *leases) Close(ctx context.Context) error {
	err := c.giveAllBack(ctx)
	if nerr := c.next.Close(ctx); err == nil {
		err = nerr
	}
	return err
}

// giveAllBack stops new leases and the sweeper, gives every lease back,
// waits for the trips still asking for one (their hits go back to the
// store as they land), and then for the store to have them all, or for
// ctx: Close leaves exact counts in the store.
func (c *leases) giveAllBack(ctx context.Context) error {
	c.closing.Store(true)
	c.closeOnce.Do(func() { close(c.stop) })
	if c.started.Load() {
		select {
		case <-c.swept:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var first firstError
	record := first.record
	// giveAll gives back every lease not still asking, on every shard,
	// and reports whether the pool is open to do it again.
	giveAll := func() bool {
		var wg sync.WaitGroup
		for shard := range c.shards {
			wg.Add(1)
			err := c.pool.SendShard(shard, true, func(i int) {
				defer wg.Done()
				c.apply(i)
				s := &c.shards[i]
				for key, e := range s.m {
					if e.asking {
						continue // given back as it lands
					}
					delete(s.m, key)
					c.giveAllToStore(i, key, e)
					c.redo(i, e) // decided by the store, without a lease
				}
			})
			if err != nil {
				wg.Done()
				if errors.Is(err, actor.ErrClosed) {
					wg.Wait()
					return false // closed before the limiter: nothing left to run on
				}
				record(err)
			}
		}
		wg.Wait()
		return true
	}
	for open := giveAll(); open && c.inflight.Load() > 0; {
		select {
		case <-c.arrived:
			open = giveAll()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	go func() { c.returns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return first.get()
}

// Open starts the sweeper; the limiter opens its counter once its policy
// is claimed, so that a refused New leaves no goroutine behind.
func (c *leases) Open(ctx context.Context) error {
	c.started.Store(true)
	go c.sweeper()
	return c.next.Open(ctx)
}
