package count

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
)

// refusalBudget is about how much memory one limiter's refusal cache may
// hold: 4 MiB, 16,384 refusals of refusalBytes, split evenly between the
// pool's actors. A key is arbitrary bytes a client may choose, so the cache
// keeps a digest of it rather than the key, and what it holds does not
// grow with the keys' length. Past the budget a new refusal takes the place
// of one chosen at random: the cache keeps up with the keys refused now,
// and a refusal let go early costs its key one round trip, never a wrong
// answer.
const refusalBudget = 4 << 20

// refusalBytes is what one remembered refusal costs, counted on the safe
// side: its digest and entry (112 bytes) in a map slot, with the slack a
// Go map keeps after growing.
const refusalBytes = 256

// minRefusalsPerActor keeps a cache on a pool of very many actors useful:
// each actor remembers at least this many refusals, whatever the budget.
const minRefusalsPerActor = 16

// minRefusalSweep is the shortest period of an actor's sweep, so that a
// cache of a very short life does not wake its actors for every refusal.
const minRefusalSweep = 100 * time.Millisecond

// refusals is the refusal cache of a limiter on a shared store (see
// rate.Options.RefusalCacheFor), in front of the counting that asks the
// store: per actor, the digests of the keys the store refused and until when, on
// this process's monotonic clock, they are sure to stay refused. A hit it
// finds refused is answered at once; any other goes on to next, and its
// trip's refusal, if the store refuses it, is remembered. A reset or a
// take-back, which may bring a key's count down, lets the key's refusal
// go on its way past. Each shard is touched only by its actor, so the hot
// path takes no lock.
//
// An actor whose shard holds refusals has a sweep armed on a timer, every
// life (at least minRefusalSweep), that lets the expired ones go: a burst
// of refusals followed by silence is given back within one life of
// expiring, with no request to prompt it. Close lets everything go and
// disarms the sweeps.
type refusals struct {
	next   onStore
	pool   *actor.Pool
	rule   algorithm.Rule // for when a refused request would fit
	life   time.Duration  // how long a refusal lives at most
	trips  sync.Pool      // of *refusalTrip
	most   int            // refusals one shard holds at most: its share of refusalBudget
	seeds  [2]maphash.Seed
	clock  clock.Clock // for its monotonic reading; clock.System but in tests
	closed atomic.Bool // close has begun: nothing more is remembered
	shards []refusalShard
}

var _ onStore = (*refusals)(nil)

type refusalShard struct {
	// m is nil while the shard holds nothing, so that a swept shard keeps
	// no table.
	m map[digest]refusal
	// peak is the most m has held since it was made. A Go map never gives
	// back the table it grew, so a sweep that leaves a quarter of the peak
	// or less copies what is left into a map of its size.
	peak int
	// gen counts this shard's take-backs and resets: a refusal decided
	// before one of them is not remembered after it, since the count it
	// saw may have gone down.
	gen   uint64
	armed bool        // a sweep is on its way: timer is set, or its job queued
	timer *time.Timer // nil until the shard's first sweep is armed
}

// digest names a key in the cache: 128 bits of two maphash sums under
// seeds of the cache's own. A key is as long as its client made it, and a
// digest is 16 bytes whatever the key. Two keys share an entry only if
// both sums collide: by chance, about n²/2¹²⁹ for n cached keys (10⁻²⁹
// for 16,384), and on purpose only for someone who knows the seeds, which
// are random for each limiter and never leave the process. Even then the
// cost is bounded: one key answered with the other's refusal for at most
// the cache's life. maphash, not SHA-256, because every hit to a shared
// store hashes its key on its actor: two maphash sums cost an order of
// magnitude less than one SHA-256 digest, whatever the key's length.
type digest struct{ a, b uint64 }

// refusal is one remembered refusal: requests of the key of weight n or
// more are refused, with verdict v, until until on the cache's clock.
type refusal struct {
	until time.Duration // a clock.Clock Monotonic reading
	n     int64
	v     Verdict
}

// refusalTrip is what the cache keeps of a hit it passed on, until the
// hit's trip lands: the hit, its key's digest, when it was sent, and the
// shard's generation then. Records are reused through refusals.trips.
type refusalTrip struct {
	c    *refusals
	q    ask // as the cache was handed it
	d    digest
	sent time.Duration // on the cache's clock
	gen  uint64
}

func newRefusals(cf Config, next onStore, life time.Duration) *refusals {
	pool := cf.Pool
	c := &refusals{
		next:   next,
		pool:   pool,
		rule:   cf.Rule,
		life:   life,
		most:   max(refusalBudget/refusalBytes/pool.Size(), minRefusalsPerActor),
		seeds:  [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		clock:  clock.System{},
		shards: make([]refusalShard, pool.Size()),
	}
	c.trips.New = func() any { return &refusalTrip{c: c} }
	return c
}

func (c *refusals) Hit(shard int, key string, n int64, to Replier) {
	c.hit(shard, ask{key: key, n: n, to: to})
}

// hit answers q from its key's refusal, if the cache holds one for its
// weight; otherwise it passes q on, to hear of its trip (landed).
func (c *refusals) hit(shard int, q ask) {
	d, now := c.digest(q.key), c.now()
	if v, ok := c.lookup(shard, d, q.n, now); ok {
		q.to.Reply(v, time.Time{}, nil) // refused: no start to give back from
		return
	}
	r := c.trips.Get().(*refusalTrip)
	r.q, r.d, r.sent, r.gen = q, d, now, c.gen(shard)
	c.next.hit(shard, ask{key: q.key, n: q.n, to: r, up: r})
}

// landed remembers the refusal t came back with, queued on the actor
// before the verdict is sent, so that the client's next request finds it.
func (r *refusalTrip) landed(shard int, t trip) {
	c, q := r.c, r.q
	if t.err == nil && !t.h.Allowed && !t.fleeting {
		c.remember(shard, r.d, q.n, r.sent, r.gen, c.rule.RetryIn(t.h.State, t.h.Now, q.n), t.v)
	}
	r.release()
	q.land(shard, t)
}

// Reply passes on the answer to a hit a layer behind gave without a trip.
func (r *refusalTrip) Reply(v Verdict, start time.Time, err error) {
	q := r.q
	r.release()
	q.to.Reply(v, start, err)
}

func (r *refusalTrip) release() {
	r.q = ask{}
	r.c.trips.Put(r)
}

// Peek asks next: a peek is what the store holds, never a cached refusal.
func (c *refusals) Peek(shard int, key string, answer func(Verdict, error)) {
	c.next.Peek(shard, key, answer)
}

func (c *refusals) Reset(shard int, key string, answer func(error)) {
	c.forget(shard, key)
	c.next.Reset(shard, key, answer)
}

func (c *refusals) TakeBack(shard int, key string, start time.Time, n int64) {
	c.forget(shard, key)
	c.next.TakeBack(shard, key, start, n)
}

func (c *refusals) Open(ctx context.Context) error { return c.next.Open(ctx) }

// digest is key's name in the cache.
func (c *refusals) digest(key string) digest {
	return digest{maphash.String(c.seeds[0], key), maphash.String(c.seeds[1], key)}
}

// now reads the cache's clock.
func (c *refusals) now() time.Duration { return c.clock.Monotonic() }

// lookup runs on shard's actor: the remembered refusal of a request of
// weight n to the key of digest d at now, if there is one.
func (c *refusals) lookup(shard int, d digest, n int64, now time.Duration) (Verdict, bool) {
	s := &c.shards[shard]
	e, ok := s.m[d]
	switch {
	case !ok:
		return Verdict{}, false
	case now >= e.until:
		delete(s.m, d)
		return Verdict{}, false
	case n < e.n:
		// A lighter request may fit, and then the remembered verdict's
		// Remaining would be stale: ask the store from now on.
		s.gen++
		delete(s.m, d)
		return Verdict{}, false
	}
	return e.v, true
}

// gen runs on shard's actor: the shard's generation, read when a hit is
// sent, for remember.
func (c *refusals) gen(shard int) uint64 { return c.shards[shard].gen }

// forget runs on shard's actor, before a take-back or reset of key goes to
// the store: key's count may go down, so its refusal, and any refusal
// still on its way to being remembered, no longer holds.
func (c *refusals) forget(shard int, key string) {
	s := &c.shards[shard]
	s.gen++
	delete(s.m, c.digest(key))
}

// remember runs on the store's callback, for a hit of weight n to the key
// of digest d sent at sent (the cache's clock) in generation gen and
// refused with v, which the store would allow retryIn after its clock's
// reading of the decision. The entry lives until sent + retryIn, less a
// millisecond for the store's resolution (sent is before the store
// decided, so that is no later than the store would allow), and at most
// the cache's life. It is handed to the actor, which drops it if a
// take-back or reset came in between; a full mailbox drops it too.
func (c *refusals) remember(shard int, d digest, n int64, sent time.Duration, gen uint64, retryIn time.Duration, v Verdict) {
	life := min(retryIn-time.Millisecond, c.life)
	if life <= 0 {
		return
	}
	until := sent + life
	_ = c.pool.SendShard(shard, false, func(int) {
		s := &c.shards[shard]
		if s.gen != gen || c.closed.Load() {
			return
		}
		if s.m == nil {
			s.m = make(map[digest]refusal)
		}
		if _, ok := s.m[d]; !ok && len(s.m) >= c.most {
			s.evictOne()
		}
		s.m[d] = refusal{until: until, n: n, v: v}
		s.peak = max(s.peak, len(s.m))
		c.arm(shard)
	})
}

// evictOne lets go of one refusal, at random: Go starts each range over a
// map at a random place.
func (s *refusalShard) evictOne() {
	for d := range s.m {
		delete(s.m, d)
		return
	}
}

// arm runs on shard's actor: unless a sweep is on its way already, it sets
// the shard's timer to send one after a life. Every refusal the shard
// holds then expires within a life of being remembered, so each is let go
// within a life of expiring.
func (c *refusals) arm(shard int) {
	s := &c.shards[shard]
	if s.armed {
		return
	}
	s.armed = true
	wait := max(c.life, minRefusalSweep)
	if s.timer != nil {
		s.timer.Reset(wait)
		return
	}
	s.timer = time.AfterFunc(wait, func() { c.tick(shard) })
}

// tick runs on shard's timer: it hands the actor its sweep, and tries
// again after minRefusalSweep while the mailbox is full. After the pool
// closes it refuses, and the ticking stops.
func (c *refusals) tick(shard int) {
	err := c.pool.SendShard(shard, false, func(int) { c.sweep(shard) })
	if errors.Is(err, actor.ErrSaturated) {
		time.AfterFunc(minRefusalSweep, func() { c.tick(shard) })
	}
}

// sweep runs on shard's actor when its timer fires: it lets the expired
// refusals go, and arms the next sweep while any are left.
func (c *refusals) sweep(shard int) {
	s := &c.shards[shard]
	s.armed = false
	if c.closed.Load() {
		return
	}
	now := c.now()
	for d, e := range s.m {
		if now >= e.until {
			delete(s.m, d)
		}
	}
	switch {
	case len(s.m) == 0:
		s.m, s.peak = nil, 0
	case len(s.m) <= s.peak/4:
		m := make(map[digest]refusal, len(s.m))
		for d, e := range s.m {
			m[d] = e
		}
		s.m, s.peak = m, len(m)
	}
	if len(s.m) > 0 {
		c.arm(shard)
	}
}

// Close closes next, which may still be giving hits back, and then lets
// the refusals go; it returns next's error, else its own.
func (c *refusals) Close(ctx context.Context) error {
	err := c.next.Close(ctx)
	if cerr := c.drop(ctx); err == nil {
		err = cerr
	}
	return err
}

// drop lets every refusal go and disarms the sweeps, on each actor, or
// returns ctx.Err() first. Nothing is remembered once it has begun; a
// pool already closed has nothing left to run, and its timers, if any,
// stop when they next fire.
func (c *refusals) drop(ctx context.Context) error {
	c.closed.Store(true)
	var wg sync.WaitGroup
	for shard := range c.shards {
		wg.Add(1)
		err := c.pool.SendShard(shard, true, func(int) {
			defer wg.Done()
			s := &c.shards[shard]
			if s.timer != nil {
				s.timer.Stop()
			}
			s.m, s.peak, s.armed = nil, 0, false
		})
		if err != nil {
			wg.Done()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
