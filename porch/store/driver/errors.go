package driver

import (
	"errors"

	"github.com/writeonce/porch-go/porch/internal/lifecycle"
)

// Errors a driver returns that an application may meet. They are declared
// here, below every driver and porch/store, so that this package imports
// nothing of porch above it; porch/store exports the same values under the
// same names (store.ErrClosed is ErrClosed), and an application tests for
// them there.
var (
	// ErrClosed is returned by writes queued after Close has begun. It is
	// the same value as porch.ErrClosed.
	ErrClosed = lifecycle.ErrClosed
	// ErrWriteFailed is returned by a Reservation's Exec or Save when one
	// of the owner's own statements failed: its transaction was rolled
	// back, so neither its writes nor its response were stored. The
	// statement's error is wrapped with it.
	ErrWriteFailed = errors.New("store: the owner's write failed; nothing was stored")
	// ErrKeyHeld is returned by a KeyStore's Inspect and Forget while an
	// owner, in any process sharing the store, holds the key, and by a
	// shared store's Reserve when the key was not free within its bound.
	ErrKeyHeld = errors.New("store: an owner holds the idempotency key")
	// ErrPolicyConflict is returned by ClaimPolicy when a limiter of the
	// same name counts in the store under another policy (see
	// Counters.ClaimPolicy).
	ErrPolicyConflict = errors.New("store: a limiter of this name already counts here")
	// ErrUnhealthy is returned by a store's Health, wrapping the reason,
	// while the store cannot commit.
	ErrUnhealthy = errors.New("store: cannot commit")
)

// Stats are a store's commit counters since it opened, as Store.Stats
// reports them (porch/store exports the type as store.Stats).
type Stats struct {
	Commits int64 // transactions committed
	Writes  int64 // writes those transactions carried, before collapsing
	Failed  int64 // transactions that failed; their writes' callers got the error
}
