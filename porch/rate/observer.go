package rate

import (
	"context"
	"strconv"
)

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
