package store_test

import (
	"errors"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// The store does not import the framework, so its queue's default is
// spelled out; it must still hold one write for every job a default pool's
// mailboxes hold.
func TestDefaultQueueSizeHoldsADefaultPool(t *testing.T) {
	if got, want := store.DefaultQueueSize, porch.DefaultPoolSize*porch.DefaultMailbox; got != want {
		t.Errorf("got DefaultQueueSize %d, want porch.DefaultPoolSize × porch.DefaultMailbox = %d", got, want)
	}
}

// A request can be refused by a closed pool or by a closed store; one
// errors.Is must catch both.
func TestErrClosedIsOneValue(t *testing.T) {
	if !errors.Is(store.ErrClosed, porch.ErrClosed) || !errors.Is(porch.ErrClosed, store.ErrClosed) {
		t.Errorf("store.ErrClosed (%v) and porch.ErrClosed (%v) do not match each other", store.ErrClosed, porch.ErrClosed)
	}
}
