package algorithm

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// admit counts n at now under r as a limiter does, if it fits.
func admit(r Rule, s driver.State, now time.Time, n int64) (driver.State, bool) {
	s = r.Advance(s, now)
	if n > r.Room(s, now) {
		return s, false
	}
	s.Count += n
	return s, true
}

// servedIn replays arrivals (offsets from t0, weight 1) under r and returns
// how many were allowed.
func servedIn(r Rule, at []time.Duration) int {
	var s driver.State
	served := 0
	for _, d := range at {
		var ok bool
		if s, ok = admit(r, s, t0.Add(d), 1); ok {
			served++
		}
	}
	return served
}

// burstAround is N requests just before a boundary W and N just after it:
// the schedule that lets a fixed window serve 2N within a moment.
func burstAround(n int, w time.Duration) []time.Duration {
	at := []time.Duration{0} // opens the window at t0
	for i := 0; i < n; i++ {
		at = append(at, w-time.Millisecond)
	}
	for i := 0; i < n; i++ {
		at = append(at, w+time.Millisecond)
	}
	return at
}

// At a window boundary a fixed window serves twice its limit within two
// milliseconds; the sliding window and GCRA (burst = limit) serve about the
// limit, as they promise.
func TestBoundaryBurst(t *testing.T) {
	const n, w = 10, time.Second
	at := burstAround(n, w)
	if got := servedIn(fixedRule{limit: n, window: w}, at); got != 2*n {
		t.Errorf("fixed: served %d of the boundary burst, want %d (the flaw the others fix)", got, 2*n)
	}
	if got := servedIn(slidingRule{limit: n, window: w}, at); got > n+1 {
		t.Errorf("sliding: served %d of the boundary burst, want at most %d", got, n+1)
	}
	// GCRA: the burst at t0, then one per interval (100ms) until the end:
	// the first at t0 plus n-1 more at once, then about w/T over the span.
	if got := servedIn(newGCRA(n, w, 0), at); got > n+n {
		t.Errorf("gcra: served %d, want at most %d (burst + rate × span)", got, 2*n)
	}
	g := newGCRA(n, w, 0)
	tight := []time.Duration{}
	for i := 0; i < 3*n; i++ {
		tight = append(tight, 0)
	}
	if got := servedIn(g, tight); got != n {
		t.Errorf("gcra: %d at once served %d, want the burst %d", 3*n, got, n)
	}
}

// Whatever the arrivals, no span of one window ever holds more than the
// algorithm allows: fixed 2×limit, sliding limit plus what the rounding of
// the estimate can let through, GCRA burst + window/interval.
func TestNoWindowHoldsMoreThanAllowed(t *testing.T) {
	const n, w = 20, time.Second
	rules := map[string]struct {
		r   Rule
		max int
	}{
		"fixed":   {fixedRule{limit: n, window: w}, 2 * n},
		"sliding": {slidingRule{limit: n, window: w}, 2 * n},
		"gcra":    {newGCRA(n, w, 5), 5 + n},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, tc := range rules {
		for round := 0; round < 50; round++ {
			var s driver.State
			var served []time.Duration
			now := time.Duration(0)
			for i := 0; i < 400; i++ {
				now += time.Duration(rng.IntN(int(50 * time.Millisecond)))
				var ok bool
				if s, ok = admit(tc.r, s, t0.Add(now), 1); ok {
					served = append(served, now)
				}
			}
			for i := range served {
				j := i
				for j < len(served) && served[j]-served[i] < w {
					j++
				}
				if j-i > tc.max {
					t.Fatalf("%s: %d served within one window from %v, want at most %d", name, j-i, served[i], tc.max)
				}
			}
		}
	}
}

// A refusal's retryIn is exact: a request of that weight is refused a
// nanosecond before it and allowed at it.
func TestRetryInIsWhenItFits(t *testing.T) {
	const n, w = 7, 3 * time.Second
	rng := rand.New(rand.NewPCG(3, 4))
	for name, r := range map[string]Rule{
		"fixed":   fixedRule{limit: n, window: w},
		"sliding": slidingRule{limit: n, window: w},
		"gcra":    newGCRA(n, w, 3),
	} {
		checked := 0
		for round := 0; round < 200; round++ {
			var s driver.State
			now := t0
			for i := 0; i < 60; i++ {
				now = now.Add(time.Duration(rng.IntN(int(400 * time.Millisecond))))
				weight := int64(1 + rng.IntN(int(r.Most())))
				next, ok := admit(r, s, now, weight)
				if ok {
					s = next
					continue
				}
				s = next
				at := now.Add(r.RetryIn(s, now, weight))
				if _, ok := admit(r, s, at, weight); !ok {
					t.Fatalf("%s: weight %d refused at %v, retryIn said it fits then (state %+v)", name, weight, at.Sub(t0), s)
				}
				if at.After(now) {
					if _, ok := admit(r, s, at.Add(-time.Nanosecond), weight); ok {
						t.Fatalf("%s: weight %d fits before retryIn (%v, state %+v)", name, weight, at.Sub(t0), s)
					}
				}
				checked++
			}
		}
		if checked == 0 {
			t.Fatalf("%s: no refusal checked", name)
		}
	}
}

// GCRA's Retry-After after a burst is one emission interval, not the
// window: the complaint of go-chi/httprate#47.
func TestGCRARetryIsOneInterval(t *testing.T) {
	r := newGCRA(10, 10*time.Second, 0)
	var s driver.State
	for i := 0; i < 10; i++ {
		var ok bool
		if s, ok = admit(r, s, t0, 1); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	s, ok := admit(r, s, t0, 1)
	if ok {
		t.Fatal("the 11th request at once was allowed")
	}
	if got := r.RetryIn(s, t0, 1); got != time.Second {
		t.Errorf("retryIn = %v, want one interval (1s)", got)
	}
}

// A state written, stored to the millisecond and loaded back never holds
// back less than the one in memory: a restart grants nothing.
func TestStoredStateHoldsBackNoLess(t *testing.T) {
	for name, r := range map[string]Rule{
		"sliding": slidingRule{limit: 1000, window: time.Second},
		"gcra":    newGCRA(5000, time.Second, 0), // a 200µs interval, below the store's resolution
	} {
		now := t0.Add(123456789)
		s, _ := admit(r, driver.State{}, now, 1)
		for i := 0; i < 40; i++ {
			s, _ = admit(r, s, now, 1)
		}
		stored := driver.State{Start: CeilMS(s.Start), Count: s.Count, Prev: s.Prev}
		loaded := driver.State{Start: time.UnixMilli(stored.Start.UnixMilli()), Count: stored.Count, Prev: stored.Prev}
		for d := time.Duration(0); d < 2*time.Second; d += 7 * time.Millisecond {
			at := now.Add(d)
			if got, want := r.Room(r.Advance(loaded, at), at), r.Room(r.Advance(s, at), at); got > want {
				t.Fatalf("%s: %v on, the loaded state admits %d, the live one %d", name, d, got, want)
			}
		}
	}
}
