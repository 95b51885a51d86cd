package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// shared counts in a store that other processes write too (PostgreSQL):
// the store decides every hit under the limiter's rule, atomically and on
// its own clock, and the actor only orders this process's hits and lets
// the committer batch them. No count is cached, so there is nothing to
// load or flush; only refusals are, for at most Options.RefusalCacheFor
// and never past the moment the store would allow again (see refusals).
type shared struct {
	l     *Limiter
	st    store.SharedCounters
	cache *refusals // nil when Options.RefusalCacheFor is negative
}

func newShared(l *Limiter, st store.SharedCounters) shared {
	c := shared{l: l, st: st}
	switch life := l.opt.RefusalCacheFor; {
	case life == 0:
		c.cache = newRefusals(l.pool, DefaultRefusalCacheFor)
	case life > 0:
		c.cache = newRefusals(l.pool, life)
	}
	return c
}

func (shared) open(context.Context) error  { return nil }
func (shared) close(context.Context) error { return nil }

func (c shared) hit(shard int, call *call) {
	l, key, n := c.l, call.key, call.n
	var sent time.Time
	var gen uint64
	if c.cache != nil {
		sent = time.Now()
		if v, ok := c.cache.lookup(shard, key, n, sent); ok {
			call.reply.Send(v, nil) // refused: no start to give back from
			return
		}
		gen = c.cache.gen(shard)
	}
	err := c.st.AddHit(key, l.rule, n, func(h store.Hit, err error) {
		if err != nil {
			// Never a verdict beside an error: the caller must not serve.
			call.reply.Send(Verdict{}, err)
			return
		}
		call.start = h.State.Start
		v := l.verdict(h.State, h.Now, l.store.Wall(), h.Allowed, n, l.rule.Room(h.State, h.Now))
		if !h.Allowed && c.cache != nil {
			// Queued on the actor before the verdict is sent, so that the
			// client's next request finds it.
			c.cache.remember(shard, key, n, sent, gen, l.rule.retryIn(h.State, h.Now, n), v)
		}
		call.reply.Send(v, nil)
	})
	if err != nil {
		call.reply.Send(Verdict{}, err)
	}
}

func (c shared) peek(_ int, key string, reply porch.Reply[Verdict]) {
	err := c.st.PeekHit(key, c.l.rule, func(h store.Hit, err error) {
		if err != nil {
			reply.Send(Verdict{}, err)
			return
		}
		reply.Send(c.l.peeked(h.State, h.Now, c.l.store.Wall()), nil)
	})
	if err != nil {
		reply.Send(Verdict{}, err)
	}
}

func (c shared) reset(shard int, key string, answer func(error)) {
	if c.cache != nil {
		c.cache.forget(shard, key)
	}
	if err := c.st.ResetHit(key, answer); err != nil {
		answer(err)
	}
}

func (c shared) takeBack(shard int, key string, start time.Time, n int64) {
	if c.cache != nil {
		c.cache.forget(shard, key)
	}
	if err := c.st.TakeBack(key, start, n, c.l.takeBackDone); err != nil {
		c.l.takeBackDone(err)
	}
}
