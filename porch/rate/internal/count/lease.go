package count

import (
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

// leases is a limiter's count-ahead on a shared store (rate.Options.Lease),
// in front of the counting that asks the store: per actor, the busy keys
// whose store trips asked for more than their request needed, and how
// many of those counted hits this process has not yet answered. A hit
// that finds one answers from memory, without a round trip; the store
// already counted it, durably, before the lease was handed out, so no
// answer runs ahead of its write. Any other hit goes on to next, asking
// its trip to count the key's next lease beside it (ask.beside), and
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
	waiting []*leaseTrip // records holding the hits only
	// gen names this lease's life: a reset gives the key a new one, and
	// an answer to a trip sent under another is not its to keep.
	gen uint64
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
	w := c.trips.Get().(*leaseTrip)
	w.q = q
	e.waiting = append(e.waiting, w)
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
func (c *leases) drop(shard int, key string) []*leaseTrip {
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

// returned is the callback for hits given back to the store: during close,
// counted, so that close waits for them.
func (c *leases) returned() func(error) {
	if !c.closing.Load() {
		return c.lost
	}
	c.returns.Add(1)
	return func(err error) {
		c.lost(err)
		c.returns.Done()
	}
}

// giveAllToStore ends what e holds of key in the store: its tokens go
// back and its answered hits are settled (one give-back, if it holds
// either), and its adopted hits, which the store does not hold, are taken
// back as any counted hit is, unless a trip in flight asked the store to
// hold them (see adopt). Each write's outcome goes to returned's callback.
func (c *leases) giveAllToStore(shard int, key string, e *lease) {
	if e.tokens > 0 || e.answered > 0 {
		c.giveToStore(shard, key, driver.Lease{Held: e.tokens, Settled: e.answered, Start: e.start}, c.returned())
	}
	if e.adopted > 0 && !e.asking {
		done := c.returned()
		if err := c.st.TakeBack(key, e.start, e.adopted, done); err != nil {
			done(err)
		}
		e.adopted = 0
	}
	e.tokens, e.answered = 0, 0
}

// giveToStore ends a lease's hold on key's hits in the store (see
// driver.SharedCounters.GiveBack), done getting the outcome.
func (c *leases) giveToStore(shard int, key string, ls driver.Lease, done func(error)) {
	if err := c.st.GiveBack(key, ls, done); err != nil {
		done(err)
	}
}

// leaseTrip is what leases keep of a hit they passed on, until its trip
// lands: the hit, the lease its trip asked for, the lease's generation,
// and when the trip was sent (local). A hit that waits for its key's
// trip for a lease is kept in one too, with the hit alone. Records are
// reused through leases.trips.
type leaseTrip struct {
	c    *leases
	q    ask // as the leases were handed it
	ls   driver.Lease
	gen  uint64
	sent time.Time
}
