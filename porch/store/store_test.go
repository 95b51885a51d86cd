package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// The store does not import the framework, so its queue's default is
// spelled out; it must still hold one write for every job a default pool's
// mailboxes hold.
func TestDefaultQueueSizeHoldsADefaultPool(t *testing.T) {
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(context.Background())
	a := actor.Of(pool)
	if got, want := commit.WithDefaults(store.Options{}).QueueSize, a.Size()*a.Mailbox(); got != want {
		t.Errorf("got a default QueueSize of %d, want a default pool's size × mailbox = %d", got, want)
	}
}

// A request can be refused by a closed pool or by a closed store; one
// errors.Is must catch both.
func TestErrClosedIsOneValue(t *testing.T) {
	if !errors.Is(store.ErrClosed, porch.ErrClosed) || !errors.Is(porch.ErrClosed, store.ErrClosed) {
		t.Errorf("store.ErrClosed (%v) and porch.ErrClosed (%v) do not match each other", store.ErrClosed, porch.ErrClosed)
	}
}
