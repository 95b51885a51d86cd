package count

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// LeaseIdle is how long a key may go without a hit on this process before
// the hits its lease still holds are given back to the shared store (see
// rate.Options.Lease); the sweeper that gives them back runs this often.
const LeaseIdle = 100 * time.Millisecond

// leases is a limiter's count-ahead on a shared store (rate.Options.Lease), in
// front of the counting that asks the store: per actor, the busy keys
// whose store trips asked for more than their request needed, and how
// many of those counted hits this process has not yet answered. A hit
// that finds one answers from memory, without a round trip; the store
// already counted it, durably, before the lease was handed out, so no
// answer runs ahead of its write. Any other hit goes on to next, asking
// its trip to count the key's next lease beside it (ask.lease), and
// hears how it landed. The store also holds the lease's hits
// (driver.Lease) until they are settled or given back, so that a reset on
// any instance, which this one hears nothing of, keeps them counted: an
// answer from memory after it is counted in its window too. Each shard's
// map is touched only by its actor.
type leases struct {
	next   onStore
	st     driver.SharedCounters // for giving a lease's hits back
	pool   *actor.Pool
	rule   algorithm.Rule
	lost   func(error) // logs hits the store could not take back
	most   int64       // the lease size asked for, at most the limit
	trips  sync.Pool   // of *leaseTrip
	shards []leaseShard

	// inflight counts the trips for a lease whose answer has not been
	// applied; arrived is signalled as each answer is handed in, so that
	// close can wait for them all.
	inflight atomic.Int64
	arrived  chan struct{}
	closing  atomic.Bool // close has begun: no new leases
	returns  sync.WaitGroup

	stop      chan struct{} // closed by close: the sweeper exits
	swept     chan struct{} // closed when the sweeper has exited
	closeOnce sync.Once
	started   atomic.Bool // open started the sweeper
}

type leaseShard struct {
	m       map[string]*lease
	nextGen uint64 // never reused, so that no answer can land on a later lease of its key

	// The store's answers are handed in here by its callback, which runs
	// on the store's goroutine and must never block on the actor (the
	// actor may be blocked queueing a write to that same goroutine). The
	// actor applies them before it touches the map, so an answer is never
	// lost to a full mailbox: at worst it waits for the shard's next job,
	// which the sweeper sends every leaseIdle.
	mu      sync.Mutex
	inbox   []func()
	pending atomic.Int32
}

// lease is one key's count-ahead on this process.
type lease struct {
	start  time.Time // the epoch its hits were counted in, on the store's clock
	tokens int64     // hits counted in that epoch and not yet answered
	// answered is the tokens answered since the store last heard of
	// them: it still holds them, until a trip or a give-back settles them
	// (driver.Lease.Settled).
	answered int64
	// adopted is hits counted in start outside the lease and given back
	// into it (giveBack): not answered until the store holds them, which
	// the key's next trip asks (driver.Lease.Adopted), else a reset would
	// not keep them counted.
	adopted int64
	// until is when, on the local clock, the tokens stop answering: the
	// epoch's end less a margin (see cutoff); end is the epoch's end, no
	// later than the store's. The sweeper gives back tokens past until
	// and before end, while the store still counts them in their epoch.
	until, end time.Time
	used       time.Time // local: the key's last hit here
	// size is what the key's next store trip asks for beyond its own
	// weight: 0 on a key's first trip, doubling with each trip while it
	// stays busy, up to leases.most.
	size int64
	// room is what the store said was left after its last trip (the
	// tokens included as counted): a lease takes at most half of it, so
	// that near the limit leases shrink to nothing and every hit is
	// decided by the store.
	room int64
	v    Verdict // the last trip's verdict: Limit and ResetAt for the tokens' answers
	// asking marks a trip for a lease in flight: the key's hits meanwhile
	// wait for it in waiting, in order, and are decided when it lands
	// (from the lease if it holds them, else by the store), so that a busy
	// key has one trip in flight rather than one per request, and no hit
	// is refused by the store for room this process is about to hold.
	asking  bool
	waiting []ask
	// gen names this lease's life: a reset gives the key a new one, and
	// an answer to a trip sent under another is not its to keep.
	gen uint64
}

var _ onStore = (*leases)(nil)

// leaseTrip is what leases keep of a hit they passed on, until its trip
// lands: the hit, the lease its trip asked for, the lease's generation,
// and when the trip was sent (local). Records are reused through
// leases.trips.
type leaseTrip struct {
	c    *leases
	q    ask // as the leases were handed it
	ls   driver.Lease
	gen  uint64
	sent time.Time
}

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

// Open starts the sweeper; the limiter opens its counter once its policy
// is claimed, so that a refused New leaves no goroutine behind.
func (c *leases) Open(ctx context.Context) error {
	c.started.Store(true)
	go c.sweeper()
	return c.next.Open(ctx)
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
	c.next.hit(shard, ask{key: q.key, n: q.n, lease: ls, to: r, up: r})
}

// landed hands what the trip came back with to its key's lease (see
// answered). A trip whose lease did not fit, where the hit alone might,
// from the store or from the hits it now holds for the lease, is taken
// back: decided again, without a lease, before the key's waiting hits.
func (r *leaseTrip) landed(shard int, t trip) {
	c, q, ls, gen, sent := r.c, r.q, r.ls, r.gen, r.sent
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
	h := t.h
	if !h.Allowed && ls.Held > 0 && (t.room >= q.n || ls.Adopted >= q.n && h.State.Start.Equal(ls.Start)) {
		c.answered(shard, q.key, ls, gen, sent, &h, Verdict{}, &q)
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
		c.hit(shard, w)
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

// cutoff is how long before its epoch's end a lease stops answering: the
// algorithm's own margin (see algorithm.Rule.LeaseCutoff), for leases
// given back once idle for LeaseIdle.
func (c *leases) cutoff() time.Duration { return c.rule.LeaseCutoff(LeaseIdle) }

// apply runs on shard's actor before anything reads the shard's leases:
// the store's answers handed in since, in the order they came.
func (c *leases) apply(shard int) {
	s := &c.shards[shard]
	if s.pending.Load() == 0 {
		return
	}
	s.mu.Lock()
	in := s.inbox
	s.inbox = nil
	s.pending.Store(0)
	s.mu.Unlock()
	for _, f := range in {
		f()
	}
}

// handIn queues f for shard's actor (see leaseShard.inbox) and asks the
// actor to run it soon; it never blocks.
func (c *leases) handIn(shard int, f func()) {
	s := &c.shards[shard]
	s.mu.Lock()
	kick := len(s.inbox) == 0 // else a job to apply them is on its way
	s.inbox = append(s.inbox, f)
	s.pending.Store(1)
	s.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
	if kick {
		// A full mailbox: the answer waits for the shard's next job.
		_ = c.pool.SendShard(shard, false, c.apply)
	}
}

// take runs on shard's actor: a verdict for a hit of weight n to key at
// now (local) from the key's lease, if it holds enough, with the epoch its
// hit was counted in.
func (c *leases) take(shard int, key string, n int64, now time.Time) (Verdict, time.Time, bool) {
	e := c.shards[shard].m[key]
	if e == nil {
		return Verdict{}, time.Time{}, false
	}
	e.used = now
	if e.tokens < n || !now.Before(e.until) {
		return Verdict{}, time.Time{}, false
	}
	e.tokens -= n
	e.answered += n
	v := e.v
	v.Allowed, v.RetryAt = true, time.Time{}
	v.Remaining = min(max(e.room+e.tokens, 0), v.Limit)
	return v, e.start, true
}

// wait runs on shard's actor for a hit the key's lease could not answer:
// if a trip for a lease is in flight, q waits for it and wait reports true.
func (c *leases) wait(shard int, q ask) bool {
	e := c.shards[shard].m[q.key]
	if e == nil || !e.asking {
		return false
	}
	e.waiting = append(e.waiting, q)
	return true
}

// askFor runs on shard's actor before a hit of weight n to key goes to the
// store: how many hits more the trip should count, to hold as the key's
// lease (in the lease it returns, Held), and the lease's generation to
// hand back with the answer. A key's first trip asks for none; it is only
// remembered, so that its next trip, if it comes before LeaseIdle, asks
// for some. Tokens too few for n, or past their until, are given back
// first, ordered before the trip, so that the store has room for all of
// n: a weighted request is never refused for hits this process holds
// itself; so are adopted hits then. Otherwise the trip settles the
// answered tokens and asks the store to hold the adopted hits.
func (c *leases) askFor(shard int, key string, n int64, now time.Time) (driver.Lease, uint64) {
	s := &c.shards[shard]
	if c.closing.Load() {
		return driver.Lease{}, 0
	}
	e := s.m[key]
	if e == nil {
		s.nextGen++
		s.m[key] = &lease{used: now, size: 1, gen: s.nextGen}
		return driver.Lease{}, s.nextGen
	}
	e.used = now
	live := now.Before(e.until)
	if e.tokens > 0 || e.adopted > 0 && !live {
		if live {
			e.room += e.tokens + e.adopted
		}
		c.giveAllToStore(shard, key, e)
	}
	ls := driver.Lease{Settled: e.answered, Start: e.start}
	e.answered = 0 // the trip settles them
	if !e.asking && e.v.Limit > 0 {
		ls.Held = max(min(e.size, c.most, (e.room-n)/2), 0)
	}
	if ls.Held == 0 {
		// No lease to land with: adopted hits go back, ordered before
		// the trip, as tokens too few for n do.
		if e.adopted > 0 && !e.asking {
			e.room += e.adopted
			c.giveAllToStore(shard, key, e)
		}
		return ls, e.gen
	}
	// Asked for with the lease, so that one trip at a time asks for them;
	// they are tokens once it lands, if the store holds them.
	ls.Adopted = e.adopted
	e.asking = true
	c.inflight.Add(1)
	return ls, e.gen
}

// unask runs on shard's actor when a trip from askFor (ls) could not be
// queued: no trip is in flight, no hit waits for one, and the answered
// hits it was to settle are still to settle.
func (c *leases) unask(shard int, key string, ls driver.Lease) {
	e := c.shards[shard].m[key]
	if e != nil && e.start.Equal(ls.Start) {
		e.answered += ls.Settled
	}
	if ls.Held > 0 {
		if e != nil {
			e.asking = false
		}
		c.inflight.Add(-1)
	}
}

// answered runs on the store's callback for a trip that asked for extra
// hits beyond its own, sent at sent (local) under generation gen: it hands
// what the store said (h and v; nil h for a failed trip) to the key's
// actor. If the trip was allowed, the extra hits are the key's lease until
// its epoch ends; sent is before the store decided, so sent plus what the
// epoch had left then is no later than its end. retry, if not nil, is the
// trip's own hit, refused only because the lease did not fit: it is
// decided again, first of the key's waiting hits, without a lease.
func (c *leases) answered(shard int, key string, ls driver.Lease, gen uint64, sent time.Time, h *driver.Hit, v Verdict, retry *ask) {
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
				c.hit(shard, *retry)
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
			e.waiting = append([]ask{*retry}, e.waiting...)
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
		c.hit(shard, w)
	}
}

// giveBack runs on shard's actor for a hit of weight n that was counted in
// the epoch start and is given back: into the key's lease, if it holds that
// epoch still and has room under Lease, without a round trip. It is
// adopted, not yet a token: the key's next trip asks the store to hold it
// (see lease.adopted).
func (c *leases) giveBack(shard int, key string, start time.Time, n int64, now time.Time) bool {
	e := c.shards[shard].m[key]
	if e == nil || !e.start.Equal(start) || !now.Before(e.until) || e.tokens+e.adopted+n > c.most {
		return false
	}
	e.adopted += n
	return true
}

// held runs on shard's actor: the hits key's lease holds at now, adopted
// ones included, which a peek adds to what the store has left.
func (c *leases) held(shard int, key string, now time.Time) int64 {
	if e := c.shards[shard].m[key]; e != nil && now.Before(e.until) {
		return e.tokens + e.adopted
	}
	return 0
}

// drop runs on shard's actor when key is reset: its lease's hits go back
// to the store, ahead of the reset, which would otherwise keep them
// counted as held (driver.SharedCounters.ResetHit), and no hit counted
// before it is given back into the new lease; a lease still on its way is
// given back to the store when it arrives. It returns the hits that
// waited for that lease: the caller decides them once the reset is
// queued, so that they count after it.
func (c *leases) drop(shard int, key string) []ask {
	s := &c.shards[shard]
	e := s.m[key]
	if e == nil {
		return nil
	}
	c.giveAllToStore(shard, key, e)
	ws := e.waiting
	s.nextGen++
	*e = lease{used: e.used, gen: s.nextGen}
	return ws
}
