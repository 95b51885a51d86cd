package rate_test

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A caller whose context has ended leaves its call to the actor: the hit it
// posted is still counted, once and against its own key, and the next
// caller is answered for its own hit, not handed the answer the ended
// caller walked away from. So every live Allow that follows an ended one
// sees both hits counted.
func TestAllowWithEndedContextLeavesTheCallAlone(t *testing.T) {
	const limit = 1000
	r := newRig(t, limit, time.Minute, rigOptions{})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	// A bound on the live calls: an actor stuck on an answer nobody reads
	// fails the test instead of hanging it.
	live, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for i := range 200 {
		if _, err := r.lim.Allow(ended, "ann"); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Allow %d with an ended context: got %v, want nil or context.Canceled", i, err)
		}
		v, err := r.lim.Allow(live, "ann")
		if want := int64(limit - 2*(i+1)); err != nil || !v.Allowed || v.Remaining != want {
			t.Fatalf("Allow %d after an ended one: got %+v, %v; want allowed with %d left", i, v, err, want)
		}
	}
}
