// Package count is the counting engine of porch/rate: how a limiter keeps
// its counts, on the key's actor, durably and exactly. It knows nothing of
// HTTP; porch/rate turns its Verdict into the one a client is told.
//
// A Counter is chosen once, when the limiter is made, from what its store
// offers:
//
//   - NewLocal (local.go), for a store that is its counters' only writer
//     (SQLite): each key's state lives in its actor's memory (view.go),
//     decided there, and written ahead to the store (bound.go);
//   - NewShared (layers.go), for a store several processes write
//     (PostgreSQL, Redis): every hit is decided by the store, in one
//     atomic step (shared.go), and the actor only orders this process's
//     hits.
//
// In front of the shared store's counting, NewShared may put layers that
// wrap the one behind them, as a bufio.Reader wraps an io.Reader: leases
// (lease.go, lease_trip.go, lease_giveback.go), which answer a busy key's
// hits from hits the store counted ahead, and in front of those the
// refusal cache (refusal.go), which answers a refused key without a trip.
// Each does its one job, keeps what it needs of a hit in a record of its
// own until the hit's trip lands, and passes the rest on; the store's
// counting knows neither.
//
// Either way the algorithm is the limiter's rule, which all apply, and
// every method of a Counter runs on the key's actor (shard), so that one
// key's hits, peeks, resets and take-backs are ordered without a lock.
package count

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Counter is how a limiter keeps its counts. Every method but Open and
// Close runs on the actor of the key it names, shard.
type Counter interface {
	// Open loads what the store holds (NewLocal) and starts what runs
	// beside the actors (NewShared's leases), before any hit.
	Open(ctx context.Context) error
	// Hit decides a hit of weight n (1 <= n <= Config.Most) to key and
	// tells to, once, when its count is durable (or why it failed).
	Hit(shard int, key string, n int64, to Replier)
	// Peek answers what a hit of weight 1 would be told, counting nothing.
	Peek(shard int, key string, answer func(Verdict, error))
	// Reset starts key's state over, calling answer once that is durable.
	Reset(shard int, key string, answer func(error))
	// TakeBack gives back n counted for key in the epoch started at start.
	TakeBack(shard int, key string, start time.Time, n int64)
	// Close leaves exact counts in the store, if it can hold others, and
	// lets go of what Open started. It returns the first error, or
	// ctx.Err().
	Close(ctx context.Context) error
}

// Verdict is the engine's decision for one hit: allowed or not, and what
// the key has left. porch/rate reports it in a rate.Verdict.
type Verdict struct {
	Allowed   bool
	Limit     int64 // the heaviest hit that can fit: Config.Most
	Remaining int64
	// ResetAt is when the key's full allowance is back, on the wall clock.
	ResetAt time.Time
	// RetryAt, on a refusal, is when a hit of the refused weight would
	// next be allowed, on the wall clock. Zero when Allowed.
	RetryAt time.Time
}

// Replier hears the answer to a Hit. Reply is called once per hit, on the
// actor or on the store's callback, and must not block: v and start (the
// epoch the hit was counted in, for a TakeBack; zero for a hit answered
// from the refusal cache) are zero when err is not nil, and then the hit
// is not counted, or its count is not known to be durable.
type Replier interface {
	Reply(v Verdict, start time.Time, err error)
}

// Config is what a Counter is given of its limiter when it is made.
type Config struct {
	Pool *actor.Pool
	Rule algorithm.Rule // the limiter's algorithm with its policy
	Most int64          // the heaviest hit that can fit: Verdict.Limit
	// Lost logs a take-back or give-back the store failed: the count stays
	// high, the safe side, until its epoch ends. It must not be nil.
	Lost func(error)
}

// verdict is what a client is told of state s at now (on the clock s is
// measured on), read against the wall clock wall: allowed, and for a
// refusal of weight n, when it would fit. room is the rule's Room(s, now),
// which the caller has at hand.
func (cf *Config) verdict(s driver.State, now, wall time.Time, allowed bool, n, room int64) Verdict {
	v := Verdict{
		Allowed:   allowed,
		Limit:     cf.Most,
		Remaining: min(max(room, 0), cf.Most),
		ResetAt:   wall.Add(cf.Rule.ResetIn(s, now)),
	}
	if !allowed {
		v.RetryAt = wall.Add(cf.Rule.RetryIn(s, now, n))
	}
	return v
}

// peeked is Peek's verdict for s at now: Allowed while a hit of weight 1
// fits.
func (cf *Config) peeked(s driver.State, now, wall time.Time) Verdict {
	v := cf.verdict(s, now, wall, true, 1, cf.Rule.Room(s, now))
	v.Allowed = v.Remaining >= 1
	if !v.Allowed {
		v.RetryAt = wall.Add(cf.Rule.RetryIn(s, now, 1))
	}
	return v
}
