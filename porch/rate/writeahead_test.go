package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// The stored count may run ahead of the true one by at most WriteAhead, is
// exact for a window's first hit and at the limit, and a clean Close leaves
// it exact.
func TestWriteAhead(t *testing.T) {
	const key = "rate:default:ip:192.0.2.9"
	tests := []struct {
		name  string
		ahead int
		limit int
		hits  int
	}{
		{name: "first hit is exact", ahead: 8, limit: 100, hits: 1},
		{name: "bounded margin", ahead: 8, limit: 100, hits: 37},
		{name: "capped at the limit", ahead: 64, limit: 10, hits: 10},
		{name: "exact mode", ahead: -1, limit: 100, hits: 23},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.limit, time.Hour, rigOptions{rate: rate.Options{WriteAhead: tc.ahead}})
			for i := range tc.hits {
				if v := r.allowKey(t, key); !v.Allowed {
					t.Fatalf("hit %d refused below the limit", i+1)
				}
			}
			got, _, ok := storedCount(t, r.st.DB(), key)
			if !ok {
				t.Fatal("no counter row after the hits")
			}
			margin := int64(max(tc.ahead, 0))
			hits := int64(tc.hits)
			if got < hits || got > hits+margin || got > int64(tc.limit) {
				t.Fatalf("stored count %d after %d hits, want within [%d, %d] and at most the limit %d",
					got, hits, hits, hits+margin, tc.limit)
			}
			if tc.hits == 1 && got != 1 {
				t.Fatalf("stored count %d after a window's first hit, want exactly 1", got)
			}
			if err := r.lim.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got, _, _ := storedCount(t, r.st.DB(), key); got != hits {
				t.Fatalf("stored count %d after Close, want the exact %d", got, hits)
			}
		})
	}
}

// A hit covered by an already committed bound answers without a write of
// its own: that is the whole point of writing ahead.
func TestWriteAheadSavesWrites(t *testing.T) {
	r := newRig(t, 1000, time.Hour, rigOptions{rate: rate.Options{WriteAhead: 64}})
	const hits = 500
	for range hits {
		r.allowKey(t, "rate:default:ip:192.0.2.10")
	}
	if w := r.st.Stats().Writes; w > hits/16 {
		t.Fatalf("%d writes for %d hits of one key with WriteAhead 64, want at most %d", w, hits, hits/16)
	}
}

// A crash (no Close) resumes from the stored bound: the client is never
// allowed more than the limit in total, only possibly fewer.
func TestWriteAheadCrashOverCountsOnly(t *testing.T) {
	const key = "rate:default:ip:192.0.2.11"
	first := newRig(t, 50, time.Hour, rigOptions{rate: rate.Options{WriteAhead: 16}})
	for range 20 {
		first.allowKey(t, key)
	}
	first.stop(t) // no lim.Close: the margin stays in the store, as after kill -9
	second := newRig(t, 50, time.Hour, rigOptions{path: first.path, clock: first.clock, rate: rate.Options{WriteAhead: 16}})
	allowed := 0
	for range 50 {
		if second.allowKey(t, key).Allowed {
			allowed++
		}
	}
	if allowed > 30 {
		t.Fatalf("allowed %d more after the crash, want at most 30 (limit 50, 20 used)", allowed)
	}
	if allowed < 30-16 {
		t.Fatalf("allowed %d more after the crash, want at least %d (over-count bounded by WriteAhead)", allowed, 30-16)
	}
}
