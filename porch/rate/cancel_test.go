package rate_test

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A caller whose context has ended leaves its call to the actor, which
// still counts the hit and records its window: the caller must not read
// what the actor writes. (Under -race, reading the call's window start
// after a cancelled wait was a data race with the actor setting it.)
func TestAllowWithEndedContextLeavesTheCallAlone(t *testing.T) {
	r := newRig(t, 1000, time.Minute, rigOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		if _, err := r.lim.Allow(ctx, "ann"); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Allow %d: got %v, want nil or context.Canceled", i, err)
		}
	}
}
