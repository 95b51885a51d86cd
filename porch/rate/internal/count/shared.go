package count

import (
	"context"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// shared counts in a store that other processes write too (PostgreSQL,
// Redis): the store decides every hit under the limiter's rule,
// atomically and on its own clock, one trip per hit, and the actor only
// orders this process's hits and lets the committer batch them. No count
// is cached, so there is nothing to load or flush.
//
// The layers NewShared may put in front of it reach it through the hit
// itself: an ask carries the lease its trip is to count beside it, and
// names the layer in front that hears how the trip landed.
type shared struct {
	Config
	st    driver.SharedCounters
	trips sync.Pool // of *storeTrip, so that a trip allocates no callback
}

var _ onStore = (*shared)(nil)

func newShared(cf Config, st driver.SharedCounters) *shared {
	c := &shared{Config: cf, st: st}
	c.trips.New = func() any {
		t := &storeTrip{c: c}
		t.done = t.landed
		return t
	}
	return c
}

// onStore is a counting on the shared path: the store's own, or a layer
// in front of it, to which the layer in front passes a hit as an ask.
type onStore interface {
	Counter
	hit(shard int, q ask)
}

// ask is a hit on its way to the shared store, as one layer hands it to
// the next: what is to be counted, and who hears of it.
type ask struct {
	key string
	n   int64
	// beside is the lease the trip is to count ahead, settle or adopt
	// beside the hit: asked for by leases, zero otherwise.
	beside driver.Lease
	// to hears the answer: the client, or the record of the layer in
	// front (which passes it on). up, when a layer passed the hit on, is
	// that same record, which hears how the trip landed before the answer
	// goes on.
	to Replier
	up landing
}

// landing is a layer's record of a hit it passed on, told how the hit's
// trip landed: on the store's callback, or on the actor for a trip that
// could not be queued. It passes t on toward the client (ask.land), or
// keeps the hit to decide it again. As a Replier it hears a hit answered
// without a trip by a layer behind it (a lease's token).
type landing interface {
	Replier
	landed(shard int, t trip)
}

// trip is what a hit's trip to a shared store came back with, as the
// layers it passed through see it before its client does. Each layer
// hands the one in front a copy, changed as that layer sees it.
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

// land hands t to whoever sent q: the layer in front, or the client.
func (q ask) land(shard int, t trip) {
	switch {
	case q.up != nil:
		q.up.landed(shard, t)
	case t.err != nil:
		// Never a verdict beside an error: the caller must not serve.
		q.to.Reply(Verdict{}, time.Time{}, t.err)
	default:
		q.to.Reply(t.v, t.h.State.Start, nil)
	}
}

// storeTrip is shared's record of one hit in flight to the store.
type storeTrip struct {
	c     *shared
	shard int
	q     ask
	done  func(driver.Hit, error) // landed, bound once to this record
}

func (c *shared) Hit(shard int, key string, n int64, to Replier) {
	c.hit(shard, ask{key: key, n: n, to: to})
}

// hit asks the store to count q: its weight, and the hits q.beside asks to
// count ahead beside it.
func (c *shared) hit(shard int, q ask) {
	t := c.trips.Get().(*storeTrip)
	t.shard, t.q = shard, q
	if err := c.st.AddHit(q.key, c.Rule, q.n+q.beside.Held, q.beside, t.done); err != nil {
		t.q = ask{}
		c.trips.Put(t)
		q.land(shard, trip{err: err}) // not queued: no trip is in flight
	}
}

// landed runs on the store's callback with what it decided for t's hit.
func (t *storeTrip) landed(h driver.Hit, err error) {
	c, shard, q := t.c, t.shard, t.q
	t.q = ask{}
	c.trips.Put(t)
	tr := trip{h: h, err: err, queued: true}
	if err == nil {
		tr.room = c.Rule.Room(h.State, h.Now)
		held := int64(0) // the lease's hits: counted, and still to answer
		if h.Allowed {
			held = q.beside.Held
		}
		tr.v = c.verdict(h.State, h.Now, c.st.Wall(), h.Allowed, q.n, tr.room+held)
	}
	q.land(shard, tr)
}

func (c *shared) Peek(shard int, key string, answer func(Verdict, error)) {
	err := c.st.PeekHit(key, c.Rule, func(h driver.Hit, err error) {
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

func (c *shared) Reset(shard int, key string, answer func(error)) {
	if err := c.st.ResetHit(key, answer); err != nil {
		answer(err)
	}
}

func (c *shared) TakeBack(shard int, key string, start time.Time, n int64) {
	if err := c.st.TakeBack(key, start, n, c.Lost); err != nil {
		c.Lost(err)
	}
}

func (c *shared) Open(context.Context) error  { return nil }
func (c *shared) Close(context.Context) error { return nil }
