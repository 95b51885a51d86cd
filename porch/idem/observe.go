package idem

import (
	"context"
	"strconv"
)

// Observer is told the outcome of every keyed request of the middlewares
// whose Options.Observer it is: what a metrics adapter counts
// (porch/metrics/prom is one, for Prometheus). A failing store shows in it
// as Unavailable outcomes; the store's own batches are told to a
// store.Observer.
//
// A nil Options.Observer observes nothing, for one nil check per request.
// IdemOutcome is called on the goroutines of the requests it concerns,
// concurrently: it must be safe for concurrent use, must not block, and
// should not allocate.
type Observer interface {
	// IdemOutcome is called once for every request that carried an
	// Idempotency-Key (or lacked a required one), when its middleware
	// decided what to do with it.
	IdemOutcome(ctx context.Context, o Outcome)
}

// Outcome is what the idempotency middleware decided for one keyed request.
// Each such request gets exactly one, decided before the handler would run.
type Outcome uint8

// The decisions of the idempotency middleware.
const (
	// Executed: the request leads its key, and its handler runs.
	Executed Outcome = iota + 1
	// Replayed: the stored response of the same request was replayed.
	Replayed
	// Mismatch: the key is stored for a different request, or a duplicate
	// ran out of MaxWait while the key's owner ran a different request; 422.
	Mismatch
	// InFlight: a duplicate waited MaxWait for the key's owner, running the
	// same request or one not known yet (an owner on another instance); 409.
	InFlight
	// Unavailable: answered 503: the pool was saturated, the store failed,
	// no key connection was free, or the request ended first.
	Unavailable
	// Invalid: refused with 400 or 413 before the key was looked up: a
	// missing required key, a malformed key, a body too large or
	// unreadable.
	Invalid
)

// String is the outcome's label: "executed", "replayed", "mismatch",
// "in_flight", "unavailable" or "invalid".
func (o Outcome) String() string {
	switch o {
	case Executed:
		return "executed"
	case Replayed:
		return "replayed"
	case Mismatch:
		return "mismatch"
	case InFlight:
		return "in_flight"
	case Unavailable:
		return "unavailable"
	case Invalid:
		return "invalid"
	}
	return "idem.Outcome(" + strconv.Itoa(int(o)) + ")"
}
