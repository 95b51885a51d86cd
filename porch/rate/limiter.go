package rate

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/rate/internal/count"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Limiter allows Limit requests per key per Window, by its
// Options.Algorithm: in fixed windows that open at a key's first request
// (the default), in sliding windows, or as a GCRA bucket. Time is measured
// on the store's monotonic timeline (SQLite) or the shared store's clock
// (PostgreSQL, Redis), so a wall-clock jump (even across a restart) grants no
// extra allowance.
//
// A Limiter is safe for concurrent use. Create it with [New]; the zero
// value is not usable.
type Limiter struct {
	pool    *actor.Pool
	store   driver.Counters
	counter count.Counter // the engine: local or shared, chosen by the store
	rule    rule          // Options.Algorithm with the limit, window and burst
	limit   int64
	most    int64 // the heaviest request that can fit: limit, or GCRA's burst
	window  time.Duration
	ahead   int64 // Options.WriteAhead, resolved
	opt     Options
	policy  string // RateLimit-Policy value, fixed per limiter
	// Header values fixed per limiter, built once.
	limitValue, policyValue []string
	rateLimitPrefix         string
	prefix                  string      // counter key prefix
	release                 func()      // ends the store's claim of this limiter's policy
	closed                  atomic.Bool // set by Close: later hits fail with porch.ErrClosed
	warnRewritten           sync.Once
	dryLog                  throttledLog // would-be refusals in DryRun
	calls                   sync.Pool    // of *call, see allow
	errs                    *errlog.Log  // for Options.Logger; nil: the process's
}

// MaxLimit is the largest limit New accepts, and so the heaviest request a
// limiter can allow. 2^40 (about 1.1e12 requests per window) is beyond any
// rate a server meets, and keeps every sum over counts exact in int64 with
// room to spare: a count never passes its limit, so count + n stays under
// 2^41 in memory; PostgreSQL adds all of a batch's hits of one key to the
// stored count before it takes the refused ones back out, a sum of at most
// (MaxBatch+1)·2^40, which int64 holds for batches of up to 2^23-1 writes,
// 2048 times the default MaxBatch (4096). It is also below 2^53, so a client that
// parses X-RateLimit-Remaining into a float64 (JavaScript) reads it
// exactly. Near int64's range, by contrast, count + n wraps negative and a
// limiter would serve past its limit.
const MaxLimit = algorithm.MaxLimit

// MaxWindow is the longest window New accepts: 100 years of 365 days. A
// time.Duration holds about 292 years, and the limiter adds to spans as
// long as a window (rounding up to whole seconds for Retry-After and
// RateLimit-Policy, a millisecond to wake the timer that forgets closed
// windows): within a second of that range the sums wrap negative, and a
// refusal would say "retry after 1 second" for a window of centuries.
const MaxWindow = algorithm.MaxWindow

// lostTakeBacks is what a limiter of the given name does with a take-back
// or give-back the store failed: log it to errs (nil: the process's log).
// The count stays high, the safe side, until its window closes.
func lostTakeBacks(errs *errlog.Log, name string) func(error) {
	return func(err error) {
		if err != nil {
			errs.Error(context.Background(), "rate: could not give back a refused request's hit; its count stays high until its window closes", "limiter", name, "err", err)
		}
	}
}

// Close writes the exact count of every open window that was written ahead
// (see Options.WriteAhead), so that a clean shutdown leaves exact counts in
// the store, and frees the limiter's Name for another policy. Call it after
// the server has drained and before the pool and the store close; porch.App
// runs closers in that order when the limiter is registered after them. It
// returns the first write error, or ctx.Err(). A hit after Close fails
// with porch.ErrClosed (the middleware answers 503): the Name is free for
// another limiter, which must be the only one counting under it.
func (l *Limiter) Close(ctx context.Context) error {
	l.closed.Store(true)
	// The policy's name is free for another limiter once this one is done
	// counting, whether or not its flush finishes in time.
	defer l.release()
	return l.counter.Close(ctx)
}
