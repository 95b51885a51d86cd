package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// GCRA limit lowered across a restart (SQLite accepts any policy on
// restart): 100 per 10s used up, then 10 per 10s. Log when the key is
// served again; the state says TAT = start + 100 × 1s.
func TestGCRALimitLowered(t *testing.T) {
	first := newRig(t, 100, 10*time.Second, rigOptions{rate: rate.Options{Algorithm: rate.GCRA}})
	for range 100 {
		first.allow(t, "c")
	}
	first.lim.Close(context.Background())
	first.stop(t)
	first.clock.Advance(5 * time.Second)
	second := newRig(t, 10, 10*time.Second, rigOptions{path: first.path, clock: first.clock, rate: rate.Options{Algorithm: rate.GCRA}})
	second.clock.Advance(20 * time.Second) // idle: the forget timer may run
	time.Sleep(50 * time.Millisecond)
	for s := 25; s <= 60; s++ {
		v := second.allow(t, "c")
		if v.Allowed {
			t.Logf("served again at +%ds (remaining %d)", s, v.Remaining)
			if s < 100 {
				t.Errorf("served at +%ds, before the stored state (TAT +100s under the new limit) allows; an idle pause lets the view forget it at start + life (20s)", s)
			}
			return
		}
		second.clock.Advance(time.Second)
	}
	t.Logf("not served within 40s")
}
