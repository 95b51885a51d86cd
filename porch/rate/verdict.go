package rate

import (
	"errors"
	"time"

	"github.com/writeonce/porch-go/porch/rate/internal/count"
)

// Verdict is a limiter's decision for one request, with what the response
// headers report.
type Verdict struct {
	Allowed bool
	// DryRun marks a verdict of a limiter in Options.DryRun, which the
	// middleware serves whatever Allowed says: Allowed is what enforcing
	// would have decided.
	DryRun    bool
	Limit     int64
	Remaining int64
	// ResetAt is when the key's full allowance is back (a fixed window's
	// close), on the wall clock, fixed when the verdict was made so that
	// every response of one window reports the same instant however long
	// its write took.
	ResetAt time.Time
	// RetryAt, on a refusal, is when a request of the refused weight would
	// next be allowed, on the wall clock: the window's close for a fixed
	// window, one emission interval on for GCRA, the moment the estimate
	// falls back under the limit for a sliding window. It is the refusal's
	// Retry-After. Zero when Allowed.
	RetryAt time.Time
	// The two flags sit together, so that a verdict is 72 bytes, not 80:
	// a request's record of its count (a verdict, a key, a RequestURI)
	// then fits in 160.
}

// ErrWeight is returned by AllowN for a weight below 1, and makes the
// middleware answer 500 when Options.Weight returns one: a request that
// costs nothing is one to exempt (see porch.ErrSkip), not to count as zero.
var ErrWeight = errors.New("rate: a request's weight must be at least 1")

// ErrOverLimit is returned, wrapped, by AllowN for a weight above the
// limit, which no window could ever allow. Nothing is counted. The
// middleware answers 413 (rate-weight-over-limit) without Retry-After rather than
// 429: a client retries a 429, and this request would be refused forever.
var ErrOverLimit = errors.New("rate: request weight exceeds the limit")

// ErrNoPrincipal is returned by Allow, AllowN, Peek and Reset for an empty
// principal: counting every caller that lacks one against one shared
// counter would be a limit nobody chose.
var ErrNoPrincipal = errors.New("rate: a principal must not be empty")

// verdictOf is the Verdict a client is told of the engine's v.
func verdictOf(v count.Verdict) Verdict {
	return Verdict{Allowed: v.Allowed, Limit: v.Limit, Remaining: v.Remaining, ResetAt: v.ResetAt, RetryAt: v.RetryAt}
}
