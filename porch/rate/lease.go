package rate

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// LeaseIdle is how long a key may go without a hit on this process before
// the hits its lease still holds are given back to the shared store (see
// Options.Lease).
const LeaseIdle = 100 * time.Millisecond

// leases is a limiter's count-ahead on a shared store (Options.Lease): per
// actor, the busy keys whose store trips asked for more than their request
// needed, and how many of those counted hits this process has not yet
// answered. A hit that finds one answers from memory, without a round trip;
// the store already counted it, durably, before the lease was handed out,
// so no answer runs ahead of its write. Each shard's map is touched only by
// its actor.
type leases struct {
	l        *Limiter
	st       store.SharedCounters
	refusals *refusals                // the limiter's refusal cache; may be nil
	most     int64                    // Options.Lease, at most the limit
	hit      func(shard int, c *call) // the limiter's counting.hit, for hits that waited
	shards   []leaseShard

	stop      chan struct{} // closed by close: the sweeper exits
	swept     chan struct{} // closed when the sweeper has exited
	closeOnce sync.Once
	started   atomic.Bool // open started the sweeper
}

type leaseShard struct {
	m      map[string]*lease
	closed bool // close gave everything back: no new leases
}

// lease is one key's count-ahead on this process.
type lease struct {
	start  time.Time // the epoch its hits were counted in, on the store's clock
	tokens int64     // hits counted in that epoch and not yet answered
	until  time.Time // local: past it the epoch may have ended, and tokens are dropped
	used   time.Time // local: the key's last hit here
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
	waiting []*call
	// gen is bumped by a reset: a lease answered before it was counted
	// before it, and is dropped.
	gen uint64
}

func newLeases(l *Limiter, st store.SharedCounters, cache *refusals, most int64, hit func(int, *call)) *leases {
	c := &leases{l: l, st: st, refusals: cache, most: min(most, l.most), hit: hit, shards: make([]leaseShard, l.pool.Size()),
		stop: make(chan struct{}), swept: make(chan struct{})}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*lease)
	}
	return c
}

// open starts the sweeper; New calls it once the limiter's policy is
// claimed, so that a refused New leaves no goroutine behind.
func (c *leases) open() {
	c.started.Store(true)
	go c.sweeper()
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
	v := e.v
	v.Allowed, v.RetryAt = true, time.Time{}
	v.Remaining = min(max(e.room+e.tokens, 0), v.Limit)
	return v, e.start, true
}

// wait runs on shard's actor for a hit the key's lease could not answer:
// if a trip for a lease is in flight, c waits for it and wait reports true.
func (c *leases) wait(shard int, cl *call) bool {
	e := c.shards[shard].m[cl.key]
	if e == nil || !e.asking {
		return false
	}
	e.waiting = append(e.waiting, cl)
	return true
}

// ask runs on shard's actor before a hit of weight n to key goes to the
// store: how many hits more the trip should count, to hold as the key's
// lease, and the generation to hand back with the answer. A key's first
// trip asks for none; it is only remembered, so that its next trip, if it
// comes before LeaseIdle, asks for some.
func (c *leases) ask(shard int, key string, n int64, now time.Time) (extra int64, gen uint64) {
	s := &c.shards[shard]
	if s.closed {
		return 0, 0
	}
	e := s.m[key]
	if e == nil {
		s.m[key] = &lease{used: now, size: 1}
		return 0, 0
	}
	e.used = now
	if e.asking || e.v.Limit == 0 {
		return 0, e.gen
	}
	extra = min(e.size, c.most, (e.room-n)/2)
	if extra <= 0 {
		return 0, e.gen
	}
	e.asking = true
	return extra, e.gen
}

// answered runs on the store's callback for a trip that asked for extra
// hits beyond its own, sent at sent (local) in generation gen: it hands
// what the store said (h and v; nil h for a failed trip) to the key's
// actor. If the trip was allowed, the extra hits are the key's lease until
// its epoch ends; sent is before the store decided, so sent plus what the
// epoch had left then is no later than its end. retry, if not nil, is the
// trip's own call, refused only because the lease did not fit: it is
// decided again, first of the key's waiting hits, without a lease.
func (c *leases) answered(shard int, key string, extra int64, gen uint64, sent time.Time, h *store.Hit, v Verdict, retry *call) {
	var until time.Time
	var room int64
	if h != nil {
		if h.Allowed && extra > 0 {
			left := h.State.Start.Add(c.l.rule.Window()).Sub(h.Now) - time.Millisecond
			until = sent.Add(left)
		}
		room = c.l.rule.Room(h.State, h.Now)
	}
	err := c.l.pool.SendShard(shard, false, func(int) {
		e := c.shards[shard].m[key]
		if e == nil || e.gen != gen {
			// Given back, reset or closed meanwhile: a lease's hits stay
			// counted, the safe side.
			if retry != nil {
				c.hit(shard, retry)
			}
			return
		}
		if extra > 0 {
			defer c.landed(shard, e)
		}
		switch {
		case h == nil:
			return
		case retry != nil:
			e.waiting = append([]*call{retry}, e.waiting...)
			e.room, e.size = room, 0 // near the limit: ask the store for every hit
			return
		}
		e.v, e.room = v, room
		switch {
		case !h.Allowed:
			e.size = 0 // at the limit: ask the store for every hit
		case extra > 0 && until.After(sent):
			if !e.start.Equal(h.State.Start) {
				e.tokens = 0 // an older epoch's: it has ended
			}
			e.start, e.tokens, e.until = h.State.Start, e.tokens+extra, until
			e.size = min(2*e.size, c.most)
		default:
			e.size = max(e.size, 1)
		}
	})
	if err != nil && retry != nil {
		retry.reply.Send(Verdict{}, err)
	}
	// Otherwise a full mailbox loses the answer: a lease's hits stay
	// counted, the safe side, and the hits waiting for it are decided
	// when the sweeper finds the key lost (see sweep).
}

// landed runs on shard's actor when e's trip for a lease has been
// answered: the hits that waited for it are decided now, in order.
func (c *leases) landed(shard int, e *lease) {
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
// epoch still, without a round trip.
func (c *leases) giveBack(shard int, key string, start time.Time, n int64, now time.Time) bool {
	e := c.shards[shard].m[key]
	if e == nil || !e.start.Equal(start) || !now.Before(e.until) {
		return false
	}
	e.tokens += n
	return true
}

// held runs on shard's actor: the hits key's lease holds at now, which a
// peek adds to what the store has left.
func (c *leases) held(shard int, key string, now time.Time) int64 {
	if e := c.shards[shard].m[key]; e != nil && now.Before(e.until) {
		return e.tokens
	}
	return 0
}

// drop runs on shard's actor when key is reset: its lease was counted
// before the reset, which the store has wiped, so its hits are not
// answered; a lease still on its way is dropped when it arrives. It
// returns the hits that waited for that lease: the caller decides them
// once the reset is queued, so that they count after it.
func (c *leases) drop(shard int, key string) []*call {
	e := c.shards[shard].m[key]
	if e == nil {
		return nil
	}
	ws := e.waiting
	e.gen++
	e.tokens, e.size, e.asking, e.v, e.waiting = 0, 0, false, Verdict{}, nil
	return ws
}

// sweeper gives back, every LeaseIdle, the leases of keys idle for as long
// (see sweep), until close.
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
				_ = c.l.pool.SendShard(shard, false, func(i int) { c.sweep(i, time.Now()) })
			}
		}
	}
}

// sweep runs on shard's actor: every key idle since LeaseIdle before now
// gives its lease's hits back to the store and is forgotten; a key whose
// epoch has ended is forgotten with nothing to give back (the store would
// ignore it: see store.SharedCounters.TakeBack).
func (c *leases) sweep(shard int, now time.Time) {
	s := &c.shards[shard]
	for key, e := range s.m {
		// A trip in flight is waited for, unless it is long lost (its
		// answer found a full mailbox): forgotten, the key's answer is
		// dropped, its hits counted and never answered, the safe side.
		if idle := now.Sub(e.used); idle < LeaseIdle || (e.asking && idle < 10*LeaseIdle) {
			continue
		}
		delete(s.m, key)
		if e.tokens > 0 && now.Before(e.until) {
			c.giveToStore(shard, key, e, c.l.takeBackDone)
		}
		c.redo(shard, e) // a lost trip's waiters: the key starts over
	}
}

// giveToStore sends e's unanswered hits back to the store, done getting
// the outcome: the key's count goes down, so a refusal remembered for it
// no longer holds.
func (c *leases) giveToStore(shard int, key string, e *lease, done func(error)) {
	if c.refusals != nil {
		c.refusals.forget(shard, key)
	}
	if err := c.st.TakeBack(key, e.start, e.tokens, done); err != nil {
		done(err)
	}
}

// close stops the sweeper and gives every lease back, waiting until the
// store has them or ctx ends: Close leaves exact counts in the store.
func (c *leases) close(ctx context.Context) error {
	c.closeOnce.Do(func() { close(c.stop) })
	if c.started.Load() {
		select {
		case <-c.swept:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
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
	for shard := range c.shards {
		wg.Add(1)
		err := c.l.pool.SendShard(shard, true, func(i int) {
			defer wg.Done()
			s := &c.shards[i]
			s.closed = true
			now := time.Now()
			for key, e := range s.m {
				delete(s.m, key)
				if e.tokens > 0 && now.Before(e.until) {
					wg.Add(1)
					c.giveToStore(i, key, e, func(err error) { record(err); wg.Done() })
				}
				c.redo(i, e) // decided by the store, without a lease
			}
		})
		if err != nil {
			wg.Done()
			if err != porch.ErrClosed {
				record(err)
			}
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
