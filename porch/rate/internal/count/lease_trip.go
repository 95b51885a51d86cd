package count

import (
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// This file is a hit's way through the leases: answered from its key's
// lease, held for the trip already asking for one, or passed on to the
// store with a lease to count beside it; and what the trip's landing
// makes of the key's lease. lease.go keeps the leases themselves.

var _ onStore = (*leases)(nil)

// newLeases makes leases of up to most hits each on st, in front of next.
func newLeases(cf Config, st driver.SharedCounters, next onStore, most int64) *leases {
	c := &leases{next: next, st: st, pool: cf.Pool, rule: cf.Rule, lost: cf.Lost, most: min(most, cf.Most),
		shards:  make([]leaseShard, cf.Pool.Size()),
		arrived: make(chan struct{}, 1), stop: make(chan struct{}), swept: make(chan struct{})}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*lease)
	}
	c.trips.New = func() any { return &leaseTrip{c: c} }
	return c
}

func (c *leases) Hit(shard int, key string, n int64, to Replier) {
	c.hit(shard, ask{key: key, n: n, to: to})
}

// hit answers q from its key's lease if that holds enough; else it waits
// for the key's trip for a lease in flight, or goes on to next, asking
// its trip to count a lease beside it.
func (c *leases) hit(shard int, q ask) {
	c.apply(shard)
	now := time.Now()
	if v, start, ok := c.take(shard, q.key, q.n, now); ok {
		q.to.Reply(v, start, nil)
		return
	}
	if c.wait(shard, q) {
		return
	}
	ls, gen := c.askFor(shard, q.key, q.n, now)
	r := c.trips.Get().(*leaseTrip)
	r.q, r.ls, r.gen, r.sent = q, ls, gen, time.Now()
	c.next.hit(shard, ask{key: q.key, n: q.n, beside: ls, to: r, up: r})
}

// landed hands what the trip came back with to its key's lease (see
// answered). A trip whose lease did not fit, where the hit alone might,
// from the store or from the hits it now holds for the lease, is taken
// back: decided again, without a lease, before the key's waiting hits.
func (r *leaseTrip) landed(shard int, t trip) {
	c, q, ls, gen, sent := r.c, r.q, r.ls, r.gen, r.sent
	h := t.h
	if t.queued && t.err == nil && !h.Allowed && ls.Held > 0 && (t.room >= q.n || ls.Adopted >= q.n && h.State.Start.Equal(ls.Start)) {
		r.ls = driver.Lease{} // r keeps the hit alone, to decide it again
		c.answered(shard, q.key, ls, gen, sent, &h, Verdict{}, r)
		return
	}
	r.release()
	switch {
	case !t.queued:
		c.unask(shard, q.key, ls) // runs on the actor: no trip is in flight
		q.land(shard, t)
		return
	case t.err != nil:
		c.answered(shard, q.key, ls, gen, sent, nil, Verdict{}, nil)
		q.land(shard, t)
		return
	}
	if !h.Allowed && ls.Adopted > 0 {
		// The hits adopted stay held, and go back to the store once the
		// lease ends: the count the store refused on comes down then.
		t.fleeting = true
	}
	c.answered(shard, q.key, ls, gen, sent, &h, t.v, nil)
	q.land(shard, t)
}

// Reply passes on the answer to a hit that the counting behind gave
// without a trip.
func (r *leaseTrip) Reply(v Verdict, start time.Time, err error) {
	q := r.q
	r.release()
	q.to.Reply(v, start, err)
}

func (r *leaseTrip) release() {
	r.q, r.ls = ask{}, driver.Lease{}
	r.c.trips.Put(r)
}

// Peek adds to what next answers the hits key's lease holds at now:
// counted, and still to answer.
func (c *leases) Peek(shard int, key string, answer func(Verdict, error)) {
	c.apply(shard)
	held := c.held(shard, key, time.Now())
	if held == 0 {
		c.next.Peek(shard, key, answer)
		return
	}
	c.next.Peek(shard, key, func(v Verdict, err error) {
		if err == nil {
			v.Remaining = min(v.Remaining+held, v.Limit)
			if v.Remaining >= 1 {
				v.Allowed, v.RetryAt = true, time.Time{}
			}
		}
		answer(v, err)
	})
}

// Reset gives key's lease back before next resets it (see drop); the hits
// that waited for a lease are decided after the reset, in the new epoch.
func (c *leases) Reset(shard int, key string, answer func(error)) {
	c.apply(shard)
	waited := c.drop(shard, key)
	c.next.Reset(shard, key, answer)
	for _, w := range waited {
		c.rehit(shard, w)
	}
}

// TakeBack gives n back into key's lease if it can (see giveBack): counted
// still, and answered again from it; else next takes them back.
func (c *leases) TakeBack(shard int, key string, start time.Time, n int64) {
	c.apply(shard)
	if c.giveBack(shard, key, start, n, time.Now()) {
		return
	}
	c.next.TakeBack(shard, key, start, n)
}

// answered runs on the store's callback for a trip that asked for extra
// hits beyond its own, sent at sent (local) under generation gen: it hands
// what the store said (h and v; nil h for a failed trip) to the key's
// actor. If the trip was allowed, the extra hits are the key's lease until
// its epoch ends; sent is before the store decided, so sent plus what the
// epoch had left then is no later than its end. retry, if not nil, keeps the
// trip's own hit, refused only because the lease did not fit: it is
// decided again, first of the key's waiting hits, without a lease.
func (c *leases) answered(shard int, key string, ls driver.Lease, gen uint64, sent time.Time, h *driver.Hit, v Verdict, retry *leaseTrip) {
	extra := ls.Held
	var end time.Time
	var room int64
	var start time.Time
	allowed := h != nil && h.Allowed
	if h != nil {
		end = sent.Add(h.State.Start.Add(c.rule.Window()).Sub(h.Now))
		room = c.rule.Room(h.State, h.Now)
		start = h.State.Start
	}
	c.handIn(shard, func() {
		if extra > 0 {
			defer c.inflight.Add(-1)
		}
		e := c.shards[shard].m[key]
		if ls.Adopted > 0 {
			c.adopt(shard, key, e, ls, gen, h)
		}
		if e == nil || e.gen != gen {
			// Forgotten, reset or closed meanwhile: the lease's hits go
			// back, whether the store counts them in the window they
			// were counted in, or in one a reset started since, which
			// keeps them counted (driver.SharedCounters.GiveBack);
			// otherwise they would stay counted and never be answered.
			if allowed && extra > 0 {
				c.giveToStore(shard, key, driver.Lease{Held: extra, Start: start}, c.returned())
			}
			if retry != nil {
				c.rehit(shard, retry)
			}
			return
		}
		if extra > 0 {
			defer c.resume(shard, e)
		}
		switch {
		case h == nil:
			return
		case retry != nil:
			e.waiting = append([]*leaseTrip{retry}, e.waiting...)
			e.room, e.size = room, 0 // near the limit: ask the store for every hit
			return
		}
		e.v, e.room = v, room
		switch {
		case !h.Allowed:
			e.size = 0 // at the limit: ask the store for every hit
		case extra > 0:
			until := end.Add(-c.cutoff())
			if !until.After(time.Now()) {
				// Too late in its epoch to answer anything: back to the
				// store while the epoch still counts them.
				c.giveToStore(shard, key, driver.Lease{Held: extra, Start: start}, c.lost)
				e.room += extra
				break
			}
			if !e.start.Equal(start) && (e.tokens > 0 || e.answered > 0) {
				// An older epoch's, past its until: back to the store,
				// which applies them if a reset carried them over.
				c.giveAllToStore(shard, key, e)
			}
			e.start, e.until, e.end = start, until, end
			e.tokens += extra
			if over := e.tokens - c.most; over > 0 {
				// Hits adopted while the trip was out filled the lease:
				// never hold more than Lease.
				c.giveToStore(shard, key, driver.Lease{Held: over, Start: start}, c.lost)
				e.tokens -= over
				e.room += over
			}
			e.size = min(2*e.size, c.most)
		default:
			e.size = max(e.size, 1)
		}
	})
}

// adopt runs on shard's actor when a trip that asked the store to hold
// adopted hits (ls.Adopted) is answered (h; nil if it failed): the store
// holds them if the trip's epoch is theirs, and they are then e's tokens,
// or go back as a lease's hits if e is no longer the lease that adopted
// them. Otherwise a reset or their window's end has cleared them, or, for
// a failed trip, they go back as plain counted hits: if the store did
// hold them, it keeps holding them, the safe side.
func (c *leases) adopt(shard int, key string, e *lease, ls driver.Lease, gen uint64, h *driver.Hit) {
	mine := e != nil && e.gen == gen
	if mine {
		e.adopted -= ls.Adopted
	}
	switch {
	case h == nil:
		done := c.returned()
		if err := c.st.TakeBack(key, ls.Start, ls.Adopted, done); err != nil {
			done(err)
		}
	case !h.State.Start.Equal(ls.Start):
	case mine && e.start.Equal(ls.Start):
		e.tokens += ls.Adopted
	default:
		c.giveToStore(shard, key, driver.Lease{Held: ls.Adopted, Start: ls.Start}, c.returned())
	}
}

// resume runs on shard's actor when e's trip for a lease has been
// answered: the hits that waited for it are decided now, in order.
func (c *leases) resume(shard int, e *lease) {
	e.asking = false
	c.redo(shard, e)
}

// redo hands the hits waiting on e back to hit, in order: the lease
// answers what it holds, and the first that it cannot goes to the store,
// perhaps asking for a lease again, which the rest then wait for.
func (c *leases) redo(shard int, e *lease) {
	ws := e.waiting
	e.waiting = nil
	for _, w := range ws {
		c.rehit(shard, w)
	}
}

// rehit decides again the hit a record kept while it waited, giving the
// record back first.
func (c *leases) rehit(shard int, w *leaseTrip) {
	q := w.q
	w.release()
	c.hit(shard, q)
}
