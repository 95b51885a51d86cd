package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// shared counts in a store that other processes write too (PostgreSQL,
// Redis): the store decides every hit under the limiter's rule,
// atomically and on its own clock, one trip per hit, and the actor only
// orders this process's hits and lets the committer batch them. No count
// is cached, so there is nothing to load or flush.
//
// The layers New may put in front of it (see counting) reach it through
// the hit itself: a trip carries the lease call.lease asks for, and its
// outcome goes back through the layers the hit came through (call.above)
// before the client hears it.
type shared struct {
	countingConfig
	st driver.SharedCounters
}

func newShared(cf countingConfig, st driver.SharedCounters) *shared {
	return &shared{countingConfig: cf, st: st}
}

func (c *shared) open(context.Context) error  { return nil }
func (c *shared) close(context.Context) error { return nil }

// hit asks the store to count call: its weight, and the hits call.lease
// asks to count ahead beside it.
func (c *shared) hit(shard int, call *call) {
	done := func(h driver.Hit, err error) { c.landed(shard, call, h, err) }
	if err := c.st.AddHit(call.key, c.rule, call.n+call.lease.Held, call.lease, done); err != nil {
		call.trip = trip{err: err} // not queued: no trip is in flight
		answerTrip(shard, call)
	}
}

// landed runs on the store's callback with what it decided for call.
func (c *shared) landed(shard int, call *call, h driver.Hit, err error) {
	call.trip = trip{h: h, err: err, queued: true}
	if err == nil {
		t := &call.trip
		t.room = c.rule.Room(h.State, h.Now)
		held := int64(0) // the lease's hits: counted, and still to answer
		if h.Allowed {
			held = call.lease.Held
		}
		t.v = c.verdict(h.State, h.Now, c.st.Wall(), h.Allowed, call.n, t.room+held)
	}
	answerTrip(shard, call)
}

// trip is what a hit's trip to a shared store came back with, as the
// layers it passed through see it before its client does.
type trip struct {
	h      driver.Hit
	err    error // the store failed the hit, or could not queue it
	queued bool  // false: the trip never left, and err says why
	room   int64 // the rule's Room(h.State, h.Now)
	v      Verdict
	// fleeting marks a refusal that a layer knows will not stand for
	// long: hits this process holds for the key go back to the store
	// soon, so it is not to be remembered.
	fleeting bool
}

// landing is a layer's part in the trips of the hits it passed on:
// landed sees call.trip, on the store's callback (on the actor for a trip
// that could not be queued), and reports whether it is to go on to the
// layers in front and the client; false when the layer has taken the hit
// back to decide it again.
type landing interface {
	landed(shard int, call *call) bool
}

// answerTrip hands call.trip to the layers call came through, innermost
// first, and then to the client, unless one of them took the hit back.
func answerTrip(shard int, call *call) {
	for i := len(call.above) - 1; i >= 0; i-- {
		l := call.above[i]
		// Popped first: a layer that takes the hit back hands it to the
		// actor, which may pass it on, and push, at once.
		call.above = call.above[:i]
		if !l.landed(shard, call) {
			return
		}
	}
	t := &call.trip
	if t.err != nil {
		// Never a verdict beside an error: the caller must not serve.
		call.reply.Send(Verdict{}, t.err)
		return
	}
	call.start = t.h.State.Start
	call.reply.Send(t.v, nil)
}

func (c *shared) peek(shard int, key string, answer func(Verdict, error)) {
	err := c.st.PeekHit(key, c.rule, func(h driver.Hit, err error) {
		if err != nil {
			answer(Verdict{}, err)
			return
		}
		answer(c.peeked(h.State, h.Now, c.st.Wall()), nil)
	})
	if err != nil {
		answer(Verdict{}, err)
	}
}

func (c *shared) reset(shard int, key string, answer func(error)) {
	if err := c.st.ResetHit(key, answer); err != nil {
		answer(err)
	}
}

func (c *shared) takeBack(shard int, key string, start time.Time, n int64) {
	if err := c.st.TakeBack(key, start, n, c.lost); err != nil {
		c.lost(err)
	}
}
