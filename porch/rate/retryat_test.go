package rate_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// A refusal's RetryAt is exact: a request of the same weight at RetryAt is
// allowed, one a nanosecond... (the clock steps in µs) a µs before is not;
// Remaining is within 0..Limit and a weight of Remaining fits at once.
func TestRetryAtExact(t *testing.T) {
	for _, tc := range []struct {
		alg          rate.Algorithm
		limit, burst int
		w            time.Duration
	}{
		{rate.SlidingWindow, 10, 0, 100 * time.Millisecond},
		{rate.GCRA, 10, 3, 100 * time.Millisecond},
		{rate.GCRA, 7, 0, 10 * time.Millisecond},
		{rate.FixedWindow, 5, 0, 50 * time.Millisecond},
	} {
		rng := rand.New(rand.NewPCG(7, uint64(tc.limit)))
		r := newRig(t, tc.limit, tc.w, rigOptions{rate: rate.Options{Algorithm: tc.alg, Burst: tc.burst}})
		r.clock.Advance(123 * time.Microsecond)
		most := tc.limit
		if tc.burst > 0 {
			most = tc.burst
		}
		bad := 0
		for i := range 3000 {
			r.clock.Advance(time.Duration(rng.IntN(int(tc.w/time.Microsecond)/tc.limit)) * time.Microsecond)
			n := 1 + rng.IntN(min(most, 3))
			v, err := r.lim.AllowN(t.Context(), "c", n)
			if err != nil {
				t.Fatal(err)
			}
			if v.Remaining < 0 || v.Remaining > int64(most) {
				t.Errorf("%s: Remaining %d out of 0..%d", tc.alg, v.Remaining, most)
			}
			if v.Allowed || i%3 != 0 {
				continue
			}
			wait := v.RetryAt.Sub(r.clock.Wall())
			if wait <= 0 {
				t.Errorf("%s: refused weight %d with RetryAt %s from now", tc.alg, n, wait)
				continue
			}
			if wait > time.Microsecond {
				r.clock.Advance(wait - time.Microsecond)
				if p, _ := r.lim.AllowN(t.Context(), "c", n); p.Allowed {
					bad++
					if bad < 4 {
						t.Errorf("%s: weight %d allowed 1µs before RetryAt", tc.alg, n)
					}
				}
				r.clock.Advance(time.Microsecond)
			} else {
				r.clock.Advance(wait)
			}
			if a, _ := r.lim.AllowN(t.Context(), "c", n); !a.Allowed {
				bad++
				if bad < 4 {
					t.Errorf("%s: weight %d refused at RetryAt (%s after the refusal): %+v", tc.alg, n, wait, a)
				}
			}
		}
	}
}
