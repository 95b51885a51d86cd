package rate

import (
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
)

// DefaultRefusalCacheFor is how long, at most, a limiter on a shared store
// answers a refused key from memory when Options.RefusalCacheFor is zero.
const DefaultRefusalCacheFor = time.Second

// maxRefusals bounds the refusals one actor remembers: past it, a refused
// key is asked of the store again, which costs a round trip, never an
// answer.
const maxRefusals = 1 << 16

// refusals is the local refusal cache of a limiter on a shared store (see
// Options.RefusalCacheFor): per actor, the keys the store refused and until
// when, on this process's monotonic clock, they are sure to stay refused.
// Each shard is touched only by its actor, so the hot path takes no lock.
type refusals struct {
	pool   *actor.Pool
	life   time.Duration // Options.RefusalCacheFor, resolved
	shards []refusalShard
}

type refusalShard struct {
	m map[string]refusal
	// gen counts this shard's take-backs and resets: a refusal decided
	// before one of them is not remembered after it, since the count it
	// saw may have gone down.
	gen     uint64
	sweepAt int       // sweep the expired entries once m holds this many
	swept   time.Time // the last sweep
}

// refusal is one remembered refusal: requests of key of weight n or more
// are refused, with verdict v, until until.
type refusal struct {
	until time.Time // local, with its monotonic reading
	n     int64
	v     Verdict
}

func newRefusals(pool *actor.Pool, life time.Duration) *refusals {
	c := &refusals{pool: pool, life: life, shards: make([]refusalShard, pool.Size())}
	for i := range c.shards {
		c.shards[i] = refusalShard{m: make(map[string]refusal), sweepAt: 64}
	}
	return c
}

// lookup runs on shard's actor: the remembered refusal of a request of
// weight n to key at now, if there is one.
func (c *refusals) lookup(shard int, key string, n int64, now time.Time) (Verdict, bool) {
	s := &c.shards[shard]
	e, ok := s.m[key]
	switch {
	case !ok:
		return Verdict{}, false
	case !now.Before(e.until):
		delete(s.m, key)
		return Verdict{}, false
	case n < e.n:
		// A lighter request may fit, and then the remembered verdict's
		// Remaining would be stale: ask the store from now on.
		s.gen++
		delete(s.m, key)
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
	delete(s.m, key)
}

// remember runs on the store's callback, for a hit of weight n to key sent
// at sent (local clock) in generation gen and refused with v, which the
// store would allow retryIn after its clock's reading of the decision. The
// entry lives until sent + retryIn, less a millisecond for the store's
// resolution (sent is before the store decided, so that is no later than
// the store would allow), and at most the cache's life. It is handed to
// the actor, which drops it if a take-back or reset came in between; a
// full mailbox drops it too.
func (c *refusals) remember(shard int, key string, n int64, sent time.Time, gen uint64, retryIn time.Duration, v Verdict) {
	life := min(retryIn-time.Millisecond, c.life)
	if life <= 0 {
		return
	}
	until := sent.Add(life)
	_ = c.pool.SendShard(shard, false, func(int) {
		s := &c.shards[shard]
		if s.gen != gen {
			return
		}
		now := time.Now()
		// At the cap the map sweeps again once a life has passed since its
		// last sweep, by when every entry it held then has expired: a
		// sweep doubling past the cap would never come, and a full map of
		// expired entries would disable the cache for good.
		if len(s.m) >= s.sweepAt && (len(s.m) < maxRefusals || !now.Before(s.swept.Add(c.life))) {
			s.sweep(now)
		}
		if len(s.m) >= maxRefusals {
			return
		}
		s.m[key] = refusal{until: until, n: n, v: v}
	})
}

// sweep lets go of the expired entries, and sets when to sweep next: when
// the map has doubled, so that sweeping costs O(1) per entry added.
func (s *refusalShard) sweep(now time.Time) {
	for k, e := range s.m {
		if !now.Before(e.until) {
			delete(s.m, k)
		}
	}
	s.sweepAt = min(max(2*len(s.m), 64), maxRefusals)
	s.swept = now
}
