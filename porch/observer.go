package porch

import (
	"context"
	"strconv"
)

// Observer is told what porch's middlewares and pool decide, as they decide
// it: what a metrics adapter counts (porch/metrics/prom is one, for
// Prometheus). A failing store shows in it as RateUnavailable and
// IdemUnavailable decisions; the store's own batches are told to a
// store.Observer.
//
// Every option that takes an Observer treats nil as "observe nothing", and
// then costs one nil check per decision. Its methods are called on the
// goroutines of the requests they concern, concurrently: they must be safe
// for concurrent use, must not block, and should not allocate.
type Observer interface {
	// RateDecision is called once for every request a limiter decided,
	// through its middleware or Limiter.Allow: limiter is its Options.Name.
	RateDecision(ctx context.Context, limiter string, o RateOutcome)
	// IdemOutcome is called once for every request that carried an
	// Idempotency-Key (or lacked a required one), when its middleware
	// decided what to do with it.
	IdemOutcome(ctx context.Context, o IdemOutcome)
	// PoolRejected is called when Pool.Send refuses a job because the key's
	// mailbox is full (ErrSaturated): a request answered 503.
	PoolRejected()
}

// RateOutcome is a limiter's decision for one request.
type RateOutcome uint8

// The decisions of a limiter.
const (
	// RateAllowed: counted, within the limit.
	RateAllowed RateOutcome = iota + 1
	// RateLimited: refused with 429, the limit reached.
	RateLimited
	// RateUnavailable: not counted, answered 503: the pool was saturated,
	// the store failed, or the request ended first.
	RateUnavailable
)

// String is the outcome's label: "allowed", "limited" or "unavailable".
func (o RateOutcome) String() string {
	switch o {
	case RateAllowed:
		return "allowed"
	case RateLimited:
		return "limited"
	case RateUnavailable:
		return "unavailable"
	}
	return "RateOutcome(" + strconv.Itoa(int(o)) + ")"
}

// IdemOutcome is what the idempotency middleware decided for one keyed
// request. Each such request gets exactly one, decided before the handler
// would run.
type IdemOutcome uint8

// The decisions of the idempotency middleware.
const (
	// IdemExecuted: the request leads its key, and its handler runs.
	IdemExecuted IdemOutcome = iota + 1
	// IdemReplayed: the stored response of the same request was replayed.
	IdemReplayed
	// IdemMismatch: the key is stored for a different request; 422.
	IdemMismatch
	// IdemInFlight: a duplicate waited MaxWait for the key's owner; 409.
	IdemInFlight
	// IdemUnavailable: answered 503: the pool was saturated, the store
	// failed, no key connection was free, or the request ended first.
	IdemUnavailable
	// IdemInvalid: refused with 400 or 413 before the key was looked up: a
	// missing required key, a malformed key, a body too large or unreadable.
	IdemInvalid
)

// String is the outcome's label: "executed", "replayed", "mismatch",
// "in_flight", "unavailable" or "invalid".
func (o IdemOutcome) String() string {
	switch o {
	case IdemExecuted:
		return "executed"
	case IdemReplayed:
		return "replayed"
	case IdemMismatch:
		return "mismatch"
	case IdemInFlight:
		return "in_flight"
	case IdemUnavailable:
		return "unavailable"
	case IdemInvalid:
		return "invalid"
	}
	return "IdemOutcome(" + strconv.Itoa(int(o)) + ")"
}
