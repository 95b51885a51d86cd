package kit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// InFlight hands out an in-flight limiter on the Kit's store; Close
// closes it, and a slot asked of it afterwards is refused.
func TestInFlight(t *testing.T) {
	k := kit.Must(kit.Open(memory.Open()))
	lim := k.InFlight(1, inflight.Options{})
	ctx := context.Background()
	release, err := lim.Acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Acquire(ctx, "alice"); !errors.Is(err, inflight.ErrLimited) {
		t.Fatalf("second Acquire: %v, want inflight.ErrLimited", err)
	}
	release()
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Acquire(ctx, "alice"); !errors.Is(err, porch.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want porch.ErrClosed", err)
	}
}
