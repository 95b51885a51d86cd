package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// counting is how a Limiter keeps its counts, chosen once in New from what
// its store offers:
//
//   - local (local.go), for a store that is its counters' only writer
//     (SQLite): each key's state lives in its actor's memory, decided
//     there, and written ahead to the store;
//   - shared (shared.go), for a store several processes write (PostgreSQL,
//     Redis): every hit is decided by the store, in one atomic step, and
//     the actor only orders this process's hits.
//
// In front of shared, New may put layers that implement counting
// themselves and wrap the one behind them, as a bufio.Reader wraps an
// io.Reader: leases (lease.go), which answer a busy key's hits from hits
// the store counted ahead, and in front of those the refusal cache
// (refusal.go), which answers a refused key without a trip. Each does its
// one job and passes the rest on; shared knows neither.
//
// Either way the algorithm is the limiter's rule, which all apply, and
// every method runs on the key's actor (shard), so that one key's hits,
// peeks, resets and take-backs are ordered without a lock.
type counting interface {
	// open loads what the store holds (local) before any actor runs.
	open(ctx context.Context) error
	// hit decides c and answers c.reply; it sets c.start before it does.
	hit(shard int, c *call)
	// peek answers what a hit of weight 1 would be told, counting nothing.
	peek(shard int, key string, answer func(Verdict, error))
	// reset starts key's state over, calling answer once that is durable.
	reset(shard int, key string, answer func(error))
	// takeBack gives back n counted for key in the epoch started at start.
	takeBack(shard int, key string, start time.Time, n int64)
	// close leaves exact counts in the store, if it can hold others.
	close(ctx context.Context) error
}

// newSharedCounting is the counting on a shared store that opt asks for:
// the store's own, behind leases if opt.Lease is set, behind the refusal
// cache unless opt.RefusalCacheFor is negative. The cache is in front, so
// that a refused key is answered before a lease or the store is asked;
// the lease's hits go back to the store through the store's own counting,
// under the cache, which hears of every Reset and take-back first.
func newSharedCounting(cf countingConfig, st driver.SharedCounters, opt Options) counting {
	var c counting = newShared(cf, st)
	if opt.Lease > 0 {
		c = newLeases(cf, st, c, int64(opt.Lease))
	}
	switch life := opt.RefusalCacheFor; {
	case life == 0:
		c = newRefusals(cf, c, defaultRefusalCacheFor)
	case life > 0:
		c = newRefusals(cf, c, life)
	}
	return c
}

// countingConfig is what a counting, or a layer in front of one, is given
// of its limiter when it is made. It holds no *Limiter: a counting depends
// on these values only, and the Limiter on the counting interface only.
type countingConfig struct {
	pool *actor.Pool
	rule rule
	most int64 // the heaviest request that can fit: Verdict.Limit
	// lost logs a take-back or give-back the store failed: the count stays
	// high, the safe side, until its epoch ends.
	lost func(error)
}

// lostTakeBacks is countingConfig.lost for the limiter name, logging to
// errs (nil: the process's log).
func lostTakeBacks(errs *errlog.Log, name string) func(error) {
	return func(err error) {
		if err != nil {
			errs.Error(context.Background(), "rate: could not give back a refused request's hit; its count stays high until its window closes", "limiter", name, "err", err)
		}
	}
}

// verdict is what a client is told of state s at now (on the clock s is
// measured on), read against the wall clock wall: allowed, and for a
// refusal of weight n, when it would fit. room is the rule's Room(s, now),
// which the caller has at hand.
func (cf *countingConfig) verdict(s driver.State, now, wall time.Time, allowed bool, n, room int64) Verdict {
	v := Verdict{
		Allowed:   allowed,
		Limit:     cf.most,
		Remaining: min(max(room, 0), cf.most),
		ResetAt:   wall.Add(cf.rule.ResetIn(s, now)),
	}
	if !allowed {
		v.RetryAt = wall.Add(cf.rule.RetryIn(s, now, n))
	}
	return v
}

// peeked is Peek's verdict for s at now: Allowed while a request of
// weight 1 fits.
func (cf *countingConfig) peeked(s driver.State, now, wall time.Time) Verdict {
	v := cf.verdict(s, now, wall, true, 1, cf.rule.Room(s, now))
	v.Allowed = v.Remaining >= 1
	if !v.Allowed {
		v.RetryAt = wall.Add(cf.rule.RetryIn(s, now, 1))
	}
	return v
}

// countingConfig is what l's counting is given of it.
func (l *Limiter) countingConfig() countingConfig {
	return countingConfig{pool: l.pool, rule: l.rule, most: l.most, lost: lostTakeBacks(l.errs, l.opt.Name)}
}
