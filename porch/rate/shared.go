package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// shared counts in a store that other processes write too (PostgreSQL,
// Redis):
// the store decides every hit under the limiter's rule, atomically and on
// its own clock, and the actor only orders this process's hits and lets
// the committer batch them. No count is cached, so there is nothing to
// load or flush; only refusals are, for at most Options.RefusalCacheFor
// and never past the moment the store would allow again (see refusals).
//
// With Options.Lease, a busy key's store trips count more than they need,
// and the hits they counted ahead answer the key's next requests from
// memory (see leases).
type shared struct {
	l      *Limiter
	st     driver.SharedCounters
	cache  *refusals // nil when Options.RefusalCacheFor is negative
	leases *leases   // nil unless Options.Lease is positive
}

func newShared(l *Limiter, st driver.SharedCounters) shared {
	c := shared{l: l, st: st}
	switch life := l.opt.RefusalCacheFor; {
	case life == 0:
		c.cache = newRefusals(l.pool, DefaultRefusalCacheFor)
	case life > 0:
		c.cache = newRefusals(l.pool, life)
	}
	if l.opt.Lease > 0 {
		c.leases = newLeases(l, st, c.cache, int64(l.opt.Lease))
		// Bound once c holds its leases: the hits that waited on a lease
		// are decided again through them.
		c.leases.hit = c.hit
	}
	return c
}

func (c shared) open(context.Context) error {
	if c.leases != nil {
		c.leases.open()
	}
	return nil
}

// close gives back the hits leases hold, so that the store's counts are
// exact once Close returns, and then lets the refusals go.
func (c shared) close(ctx context.Context) error {
	var err error
	if c.leases != nil {
		err = c.leases.close(ctx)
	}
	if c.cache != nil {
		if cerr := c.cache.close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

func (c shared) hit(shard int, call *call) {
	var now time.Time
	if c.leases != nil {
		c.leases.apply(shard)
		now = time.Now()
		if v, start, ok := c.leases.take(shard, call.key, call.n, now); ok {
			call.start = start
			call.reply.Send(v, nil)
			return
		}
		if c.leases.wait(shard, call) {
			return
		}
	}
	c.trip(shard, call, now)
}

// trip decides call in the store. With leases it may ask the store to
// count more than the call's weight, for the key's lease; a trip whose
// lease did not fit, where the call alone might, is decided again without
// one. now is the local time of the hit, or zero without leases.
func (c shared) trip(shard int, call *call, now time.Time) {
	l, key, n := c.l, call.key, call.n
	var (
		d      digest
		cached time.Duration // when the hit was sent, on the cache's clock
		gen    uint64
	)
	if c.cache != nil {
		d, cached = c.cache.digest(key), c.cache.now()
		if v, ok := c.cache.lookup(shard, d, n, cached); ok {
			call.reply.Send(v, nil) // refused: no start to give back from
			return
		}
		gen = c.cache.gen(shard)
	}
	var (
		ls   driver.Lease
		lgen uint64
		sent time.Time // when the hit was sent, for the lease
	)
	if c.leases != nil {
		ls, lgen = c.leases.ask(shard, key, n, now)
		sent = time.Now()
	}
	extra := ls.Held
	done := func(h driver.Hit, err error) {
		if err != nil {
			if c.leases != nil {
				c.leases.answered(shard, key, ls, lgen, sent, nil, Verdict{}, nil)
			}
			// Never a verdict beside an error: the caller must not serve.
			call.reply.Send(Verdict{}, err)
			return
		}
		room := l.rule.Room(h.State, h.Now)
		if adopted := ls.Adopted; !h.Allowed && extra > 0 && (room >= n || adopted >= n && h.State.Start.Equal(ls.Start)) {
			// The lease did not fit, the request may, from the store or
			// from the hits it now holds for the lease: it is decided
			// again, without a lease, before the key's waiting hits.
			c.leases.answered(shard, key, ls, lgen, sent, &h, Verdict{}, call)
			return
		}
		call.start = h.State.Start
		held := int64(0) // the lease's hits: counted, and still to answer
		if h.Allowed {
			held = extra
		}
		v := l.verdict(h.State, h.Now, l.store.Wall(), h.Allowed, n, room+held)
		if !h.Allowed && c.cache != nil {
			// Queued on the actor before the verdict is sent, so that the
			// client's next request finds it.
			c.cache.remember(shard, d, n, cached, gen, l.rule.RetryIn(h.State, h.Now, n), v)
		}
		if c.leases != nil {
			c.leases.answered(shard, key, ls, lgen, sent, &h, v, nil)
		}
		call.reply.Send(v, nil)
	}
	var err error
	if c.leases != nil {
		err = c.st.AddLeased(key, l.rule, n+extra, ls, done)
	} else {
		err = c.st.AddHit(key, l.rule, n, done)
	}
	if err != nil {
		if c.leases != nil {
			c.leases.unask(shard, key, ls) // not queued: no trip is in flight
		}
		call.reply.Send(Verdict{}, err)
	}
}

func (c shared) peek(shard int, key string, reply actor.Reply[Verdict]) {
	var held int64 // hits this process's lease holds: counted, and still to answer
	if c.leases != nil {
		c.leases.apply(shard)
		held = c.leases.held(shard, key, time.Now())
	}
	err := c.st.PeekHit(key, c.l.rule, func(h driver.Hit, err error) {
		if err != nil {
			reply.Send(Verdict{}, err)
			return
		}
		v := c.l.peeked(h.State, h.Now, c.l.store.Wall())
		if held > 0 {
			v.Remaining = min(v.Remaining+held, v.Limit)
			if v.Remaining >= 1 {
				v.Allowed, v.RetryAt = true, time.Time{}
			}
		}
		reply.Send(v, nil)
	})
	if err != nil {
		reply.Send(Verdict{}, err)
	}
}

func (c shared) reset(shard int, key string, answer func(error)) {
	if c.cache != nil {
		c.cache.forget(shard, key)
	}
	var waited []*call
	if c.leases != nil {
		c.leases.apply(shard)
		waited = c.leases.drop(shard, key)
	}
	if err := c.st.ResetHit(key, answer); err != nil {
		answer(err)
	}
	for _, w := range waited {
		c.hit(shard, w) // after the reset: they count in the new epoch
	}
}

func (c shared) takeBack(shard int, key string, start time.Time, n int64) {
	if c.cache != nil {
		c.cache.forget(shard, key)
	}
	if c.leases != nil {
		c.leases.apply(shard)
		if c.leases.giveBack(shard, key, start, n, time.Now()) {
			return // back in the key's lease: counted still, answered again from it
		}
	}
	if err := c.st.TakeBack(key, start, n, c.l.takeBackDone); err != nil {
		c.l.takeBackDone(err)
	}
}
