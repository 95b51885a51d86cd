package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// counting is how a Limiter keeps its counts, chosen once in New from what
// its store offers:
//
//   - local (local.go), for a store that is its counters' only writer
//     (SQLite): each key's state lives in its actor's memory, decided
//     there, and written ahead to the store;
//   - shared (shared.go), for a store several processes write (PostgreSQL,
//     Redis):
//     every hit is decided by the store, in one atomic step, and the actor
//     only orders this process's hits.
//
// Either way the algorithm is the limiter's rule, which both apply, and
// every method runs on the key's actor (shard), so that one key's hits,
// peeks, resets and take-backs are ordered without a lock.
type counting interface {
	// open loads what the store holds (local) before any actor runs.
	open(ctx context.Context) error
	// hit decides c and answers c.reply; it sets c.start before it does.
	hit(shard int, c *call)
	// peek answers what a hit of weight 1 would be told, counting nothing.
	peek(shard int, key string, reply actor.Reply[Verdict])
	// reset starts key's state over, calling answer once that is durable.
	reset(shard int, key string, answer func(error))
	// takeBack gives back n counted for key in the epoch started at start.
	takeBack(shard int, key string, start time.Time, n int64)
	// close leaves exact counts in the store, if it can hold others.
	close(ctx context.Context) error
}

// verdict is what a client is told of state s at now (on the clock s is
// measured on), read against the wall clock wall: allowed, and for a
// refusal of weight n, when it would fit. room is the rule's Room(s, now),
// which the caller has at hand.
func (l *Limiter) verdict(s driver.State, now, wall time.Time, allowed bool, n, room int64) Verdict {
	v := Verdict{
		Allowed:   allowed,
		Limit:     l.most,
		Remaining: min(max(room, 0), l.most),
		ResetAt:   wall.Add(l.rule.ResetIn(s, now)),
	}
	if !allowed {
		v.RetryAt = wall.Add(l.rule.RetryIn(s, now, n))
	}
	return v
}

// peeked is Peek's verdict for s at now: Allowed while a request of
// weight 1 fits.
func (l *Limiter) peeked(s driver.State, now, wall time.Time) Verdict {
	v := l.verdict(s, now, wall, true, 1, l.rule.Room(s, now))
	v.Allowed = v.Remaining >= 1
	if !v.Allowed {
		v.RetryAt = wall.Add(l.rule.RetryIn(s, now, 1))
	}
	return v
}
