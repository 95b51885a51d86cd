package rate_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/rate"
)

// idealGCRA replays served hits through an exact GCRA: a served hit that the
// ideal bucket would not conform is one the limiter must never have served.
func idealGCRAViolations(served []time.Time, T time.Duration, burst int64) (int, time.Time) {
	var tat time.Time
	bad := 0
	var first time.Time
	for _, t := range served {
		if tat.Before(t) {
			tat = t
		}
		n := tat.Add(T)
		if n.Sub(t) > time.Duration(burst)*T {
			bad++
			if first.IsZero() {
				first = t
			}
		}
		tat = n
	}
	return bad, first
}

// maxInSpan is the most hits within any half-open span of length w.
func maxInSpan(served []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range served {
		for served[i].Sub(served[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Crash (no Close) at random instants, sub-millisecond steps, GCRA below a
// millisecond's interval: the served hits, across every restart, must
// conform to an exact GCRA.
func TestCrashGCRASubMS(t *testing.T) {
	for _, crashes := range []bool{false, true} {
		t.Logf("crashes %v", crashes)
		for _, tc := range []struct {
			limit, burst int
			window       time.Duration
		}{
			{5000, 1, time.Second}, {5000, 3, time.Second}, {7, 2, 10 * time.Millisecond}, {3, 0, 1001 * time.Microsecond},
		} {
			rng := rand.New(rand.NewPCG(1, uint64(tc.limit)))
			opt := rigOptions{rate: rate.Options{Algorithm: rate.GCRA, Burst: tc.burst, WriteAhead: 4}}
			r := newRig(t, tc.limit, tc.window, opt)
			r.clock.Advance(337 * time.Microsecond)
			rule := algorithm.MustRule(algorithm.GCRA, int64(tc.limit), tc.window, int64(tc.burst))
			T := rule.Interval()
			b := int64(tc.burst)
			if b == 0 {
				b = int64(tc.limit)
			}
			var served []time.Time
			for i := range 4000 {
				if crashes && rng.IntN(200) == 0 {
					if rng.IntN(2) == 0 {
						r.lim.Close(context.Background())
					}
					r.stop(t)
					o := opt
					o.path, o.clock = r.path, r.clock
					r = newRig(t, tc.limit, tc.window, o)
				}
				r.clock.Advance(time.Duration(rng.IntN(int(2*T/time.Microsecond)+1)) * time.Microsecond / 2)
				_ = i
				if r.allowKey(t, "rate:default:ip:192.0.2.77").Allowed {
					served = append(served, r.clock.Wall())
				}
			}
			if bad, first := idealGCRAViolations(served, T, b); bad > 0 {
				t.Errorf("crashes %v gcra %d/%s burst %d: %d of %d served hits break an exact GCRA (first at +%s)", crashes, tc.limit, tc.window, tc.burst, bad, len(served), first.Sub(t0))
			}
		}
	}
}

// Sliding: never more than 2×limit in any window span, across crashes at
// window boundaries (the roll) and inside windows.
func TestCrashSlidingBoundary(t *testing.T) {
	const limit, w = 10, 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(2, 3))
	opt := rigOptions{rate: rate.Options{Algorithm: rate.SlidingWindow, WriteAhead: 4}}
	r := newRig(t, limit, w, opt)
	r.clock.Advance(777 * time.Microsecond)
	var served []time.Time
	for range 6000 {
		if rng.IntN(100) == 0 {
			if rng.IntN(2) == 0 {
				r.lim.Close(context.Background())
			}
			r.stop(t)
			o := opt
			o.path, o.clock = r.path, r.clock
			r = newRig(t, limit, w, o)
		}
		r.clock.Advance(time.Duration(rng.IntN(4000)) * time.Microsecond)
		if r.allowKey(t, "rate:default:ip:192.0.2.77").Allowed {
			served = append(served, r.clock.Wall())
		}
	}
	if m := maxInSpan(served, w); m > 2*limit {
		t.Errorf("sliding: %d served within one window span, want at most %d", m, 2*limit)
	}
	// the exact sliding replay, anchored as the limiter anchors: served hits only
	rule := algorithm.MustRule(algorithm.Sliding, int64(limit), w, 0)
	_ = rule
	t.Logf("served %d, max in a span %d", len(served), maxInSpan(served, w))
}

// A GCRA key far under its rate opens a new epoch at nearly every hit; the
// bound its old epoch wrote carries into the new one (see local.carry).
// Crash (with and without Close) at random while the client alternates
// sparse hits, which carry, with bursts that fill the bucket: after every
// restart the store must hold the client back at least as long as the
// bucket the served hits filled, so the served hits conform to an exact
// GCRA.
func TestCrashGCRACarriedBound(t *testing.T) {
	for _, tc := range []struct {
		limit, burst, ahead int
		window              time.Duration
	}{
		{1000, 4, 8, time.Second}, {1000, 0, 256, time.Second}, {5000, 3, 16, time.Second}, {7, 2, 4, 10 * time.Millisecond},
	} {
		rng := rand.New(rand.NewPCG(7, uint64(tc.limit+tc.ahead)))
		opt := rigOptions{rate: rate.Options{Algorithm: rate.GCRA, Burst: tc.burst, WriteAhead: tc.ahead}}
		r := newRig(t, tc.limit, tc.window, opt)
		r.clock.Advance(337 * time.Microsecond)
		rule := algorithm.MustRule(algorithm.GCRA, int64(tc.limit), tc.window, int64(tc.burst))
		T := rule.Interval()
		b := int64(tc.burst)
		if b == 0 {
			b = int64(tc.limit)
		}
		var served []time.Time
		burst := 0
		for range 4000 {
			if rng.IntN(150) == 0 {
				if rng.IntN(2) == 0 {
					r.lim.Close(context.Background())
				}
				r.stop(t)
				o := opt
				o.path, o.clock = r.path, r.clock
				r = newRig(t, tc.limit, tc.window, o)
				burst = int(b) + 2 // straight after a restart: fill the bucket
			}
			switch {
			case burst > 0:
				burst--
			case rng.IntN(40) == 0:
				burst = rng.IntN(int(b) + 2)
			default: // sparse: one to three intervals apart, a new epoch each
				r.clock.Advance(T + time.Duration(rng.Int64N(int64(2*T))))
			}
			if r.allowKey(t, "rate:default:ip:192.0.2.78").Allowed {
				served = append(served, r.clock.Wall())
			}
		}
		if bad, first := idealGCRAViolations(served, T, b); bad > 0 {
			t.Errorf("gcra %d/%s burst %d ahead %d: %d of %d served hits break an exact GCRA (first at +%s)", tc.limit, tc.window, tc.burst, tc.ahead, bad, len(served), first.Sub(t0))
		}
	}
}

// A busy GCRA key under its rate writes about once per margin, not once
// per hit: the carried bound and the streak (see local.carry) do for
// GCRA's epochs what write-ahead does within a window.
func TestGCRABusyKeyWritesAhead(t *testing.T) {
	const hits = 2000
	r := newRig(t, 1_000_000, time.Second, rigOptions{rate: rate.Options{Algorithm: rate.GCRA}}) // T = 1µs
	before := r.st.Stats()
	for range hits {
		r.clock.Advance(10 * time.Microsecond) // each hit finds the bucket empty
		if !r.allowKey(t, "rate:default:ip:192.0.2.79").Allowed {
			t.Fatal("refused a client far under its rate")
		}
	}
	writes := r.st.Stats().Writes - before.Writes
	t.Logf("%d hits, %d writes", hits, writes)
	// A margin of the default WriteAhead (256) intervals covers 25 hits 10
	// intervals apart; before the carry every hit wrote.
	if writes > hits/10 {
		t.Errorf("%d writes for %d hits of a busy GCRA key, want at most %d", writes, hits, hits/10)
	}
}
