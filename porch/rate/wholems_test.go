package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// A window that is not whole milliseconds (New accepts one for FixedWindow
// and GCRA) is stored as its milliseconds rounded down, so that a restart
// reads the row as one of another policy (resumedStart) and moves its start
// back by the lost fraction: GCRA's TAT, and a fixed window's close, come
// that much earlier. Limit 1 per 1.999ms, one hit at a whole millisecond,
// a restart 1ms later: the next hit must still be refused (0.999ms early).
func TestRestartWindowNotWholeMS(t *testing.T) {
	const key = "rate:default:ip:192.0.2.78"
	const window = 1999 * time.Microsecond
	for _, alg := range []rate.Algorithm{rate.FixedWindow, rate.GCRA} {
		for _, clean := range []bool{false, true} {
			opt := rigOptions{rate: rate.Options{Algorithm: alg}}
			first := newRig(t, 1, window, opt)
			if !first.allowKey(t, key).Allowed {
				t.Fatal("first hit refused")
			}
			if v := first.allowKey(t, key); v.Allowed {
				t.Fatal("second hit at once allowed")
			}
			if clean {
				if err := first.lim.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			first.stop(t)
			first.clock.Advance(time.Millisecond)
			o := opt
			o.path, o.clock = first.path, first.clock
			second := newRig(t, 1, window, o)
			if v := second.allowKey(t, key); v.Allowed {
				t.Errorf("%s (clean %v): a hit 1ms after the first, of 1 per %s, was allowed after a restart", alg, clean, window)
			}
		}
	}
}
