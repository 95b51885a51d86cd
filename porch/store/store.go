package store

import (
	"errors"

	"github.com/writeonce/porch-go/porch/internal/lifecycle"
)

// Errors a store returns that an application may meet.
var (
	// ErrClosed is returned by writes queued after Close has begun. It is
	// the same value as porch.ErrClosed, so one errors.Is catches a request
	// refused by the pool or by the store.
	ErrClosed = lifecycle.ErrClosed
	// ErrWriteFailed is returned by a reservation's Exec or Save (idem.Exec, for a handler)
	// when one of the owner's own statements failed (a constraint, a bad
	// query): its transaction was rolled back, so neither its writes nor its
	// response were stored. The statement's error is wrapped with it.
	ErrWriteFailed = errors.New("store: the owner's write failed; nothing was stored")
	// ErrKeyHeld is returned by a store's Inspect and Forget (through
	// idem's Lookup and Forget) while an owner, in any process sharing the
	// store, holds the key: its response is not known yet, and must not be
	// forgotten under it. A shared store's Reserve returns it when the key
	// was not free within the store's bound (postgres.Options.Timeout);
	// idem answers that request 409, in flight.
	ErrKeyHeld = errors.New("store: an owner holds the idempotency key")
)

// Stats are a store's commit counters since it opened.
type Stats struct {
	Commits int64 // transactions committed
	Writes  int64 // writes those transactions carried, before collapsing
	Failed  int64 // transactions that failed; their writes' callers got the error
}
