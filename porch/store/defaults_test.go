package store_test

import (
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
