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
// the committer batch them. Nothing is cached, so there is nothing to
// load or flush.
type shared struct {
	l  *Limiter
	st store.SharedCounters
}

func (shared) open(context.Context) error  { return nil }
func (shared) close(context.Context) error { return nil }

func (c shared) hit(_ int, call *call) {
	l, n := c.l, call.n
	err := c.st.AddHit(call.key, l.rule, n, func(h store.Hit, err error) {
		if err != nil {
			// Never a verdict beside an error: the caller must not serve.
			call.reply.Send(Verdict{}, err)
			return
		}
		call.start = h.State.Start
		call.reply.Send(l.verdict(h.State, h.Now, l.store.Wall(), h.Allowed, n), nil)
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

func (c shared) reset(_ int, key string, answer func(error)) {
	if err := c.st.ResetHit(key, answer); err != nil {
		answer(err)
	}
}

func (c shared) takeBack(_ int, key string, start time.Time, n int64) {
	if err := c.st.TakeBack(key, start, n, c.l.takeBackDone); err != nil {
		c.l.takeBackDone(err)
	}
}
