package rate

import (
	"context"
	"errors"
	"strconv"
	"time"
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

// Observer is told every decision of the limiters whose Options.Observer it
// is: what a metrics adapter counts (porch/metrics/prom is one, for
// Prometheus). A failing store shows in it as Unavailable decisions; the
// store's own batches are told to a store.Observer.
//
// A nil Options.Observer observes nothing, for one nil check per decision.
// RateDecision is called on the goroutines of the requests it concerns,
// concurrently: it must be safe for concurrent use, must not block, and
// should not allocate.
type Observer interface {
	// RateDecision is called once for every request a limiter decided,
	// through its middleware or Limiter.Allow: limiter is its Options.Name.
	// v is the verdict (its Remaining is what X-RateLimit-Remaining
	// reports), so that an observer can put it beside the outcome on the
	// request's trace; it is the zero Verdict when o is Unavailable: no
	// verdict was reached.
	RateDecision(ctx context.Context, limiter string, o Outcome, v Verdict)
}

// Outcome is a limiter's decision for one request.
type Outcome uint8

// The decisions of a limiter.
const (
	// Allowed: counted, within the limit.
	Allowed Outcome = iota + 1
	// Limited: refused with 429, the limit reached.
	Limited
	// Unavailable: not counted, answered 503: the pool was saturated, the
	// store failed, or the request ended first.
	Unavailable
)

// String is the outcome's label: "allowed", "limited" or "unavailable".
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Limited:
		return "limited"
	case Unavailable:
		return "unavailable"
	}
	return "rate.Outcome(" + strconv.Itoa(int(o)) + ")"
}
