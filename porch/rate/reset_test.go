package rate_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// reset clears principal's window and fails the test on error.
func (r *rig) reset(t *testing.T, principal string) {
	t.Helper()
	if err := r.lim.Reset(context.Background(), principal); err != nil {
		t.Fatalf("reset %q: %v", principal, err)
	}
}

// After Reset the whole limit is there again, for a whole window from the
// reset; other principals keep their counts.
func TestResetClears(t *testing.T) {
	r := newRig(t, 3, time.Minute, rigOptions{})
	for range 3 {
		r.allow(t, "dave")
		r.allow(t, "erin")
	}
	if r.allow(t, "dave").Allowed {
		t.Fatal("Allow over the limit allowed before the reset")
	}
	r.clock.Advance(20 * time.Second)
	r.reset(t, "dave")
	if v := r.peek(t, "dave"); !v.Allowed || v.Remaining != 3 || !v.ResetAt.Equal(r.clock.Wall().Add(time.Minute)) {
		t.Fatalf("after reset: got %+v, want 3 remaining until %v", v, r.clock.Wall().Add(time.Minute))
	}
	for i := range 3 {
		if !r.allow(t, "dave").Allowed {
			t.Fatalf("Allow %d after the reset refused", i+1)
		}
	}
	if r.allow(t, "dave").Allowed {
		t.Fatal("Allow 4 after the reset allowed: the limit did not come back")
	}
	if r.allow(t, "erin").Allowed {
		t.Fatal("another principal's count was reset too")
	}
}

// Resetting a principal that has no open window writes nothing: resetting
// after every successful login costs only those that had failures.
func TestResetWithoutWindowWritesNothing(t *testing.T) {
	r := newRig(t, 3, time.Minute, rigOptions{})
	r.reset(t, "frank")
	r.allow(t, "frank")
	r.clock.Advance(time.Minute)
	before := r.st.Stats().Writes
	r.reset(t, "frank")
	if got := r.st.Stats().Writes; got != before {
		t.Fatalf("reset of closed and absent windows wrote %d times, want none", got-before)
	}
}

// A reset survives a crash (the store closed without the limiter's
// flush), whether the key's bound was written exactly or ahead and
// whatever write was still queued: the journal's newest row is the reset's.
// Hits after the reset survive too: they wait for writes of their own,
// never for the old window's bound.
func TestResetDurableAcrossRestart(t *testing.T) {
	tests := []struct {
		name        string
		ahead       int
		before      int // hits before the reset
		after       int // hits after it
		wantAtLeast int64
	}{
		{name: "exact writes", ahead: -1, before: 10, after: 0},
		{name: "written ahead", ahead: 64, before: 40, after: 0},
		{name: "at the limit", ahead: 64, before: 50, after: 0},
		{name: "hits after the reset", ahead: 64, before: 40, after: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt := rigOptions{rate: rate.Options{WriteAhead: tc.ahead}}
			first := newRig(t, 50, time.Hour, opt)
			for range tc.before {
				first.allow(t, "gina")
			}
			first.reset(t, "gina")
			for range tc.after {
				first.allow(t, "gina")
			}
			first.stop(t) // no lim.Close, as after kill -9
			opt.path, opt.clock = first.path, first.clock
			second := newRig(t, 50, time.Hour, opt)
			v := second.peek(t, "gina")
			// After a crash a count may come back over-counted by up to
			// WriteAhead, never under.
			over := int64(max(tc.ahead, 0))
			if used := 50 - v.Remaining; used < int64(tc.after) || used > int64(tc.after)+over || (tc.after == 0 && used != 0) {
				t.Fatalf("after restart: %d used, want %d (at most %d over, and exactly 0 after only a reset)", used, tc.after, over)
			}
		})
	}
}

// Allow and Reset race: every reset clears exactly the hits counted before
// it. After each round, the count must hold every hit that was allowed
// after Reset returned, and none that was answered before Reset was
// called; hits in flight meanwhile may fall on either side.
func TestResetRacesAllow(t *testing.T) {
	const (
		workers = 8
		hits    = 40 // per worker per round
		rounds  = 5
		limit   = 100000
	)
	r := newRig(t, limit, time.Hour, rigOptions{rate: rate.Options{WriteAhead: 16}})
	var seq atomic.Int64 // a logical clock: orders every start and end
	type span struct{ start, end int64 }
	for round := range rounds {
		principal := fmt.Sprintf("race%d", round%2) // a second round reuses a reset key
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex // protects allowed
			allowed []span
			once    sync.Once
		)
		underway := make(chan struct{}) // closed once worker 0 is halfway, or has stopped
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w == 0 {
					defer once.Do(func() { close(underway) })
				}
				for i := range hits {
					if w == 0 && i == hits/2 {
						once.Do(func() { close(underway) })
					}
					s := seq.Add(1)
					v, err := r.lim.Allow(context.Background(), principal)
					e := seq.Add(1)
					if err != nil {
						t.Errorf("Allow: %v", err)
						return
					}
					if v.Allowed {
						mu.Lock()
						allowed = append(allowed, span{s, e})
						mu.Unlock()
					}
				}
			}()
		}
		<-underway
		called := seq.Add(1)
		if err := r.lim.Reset(context.Background(), principal); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		returned := seq.Add(1)
		wg.Wait()
		var after, notBefore int64
		for _, s := range allowed {
			if s.start > returned {
				after++
			}
			if s.end > called {
				notBefore++
			}
		}
		v := r.peek(t, principal)
		count := limit - v.Remaining
		if count < after || count > notBefore {
			t.Fatalf("round %d: count %d after the reset, want between %d (allowed after it returned) and %d (not answered before it was called)",
				round, count, after, notBefore)
		}
		r.reset(t, principal)
	}
}
