package rate

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/writeonce/porch"
	"github.com/writeonce/writeonce/porch/store"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

func keys(v *view) []string {
	var ks []string
	for k := range v.counts {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestViewForget(t *testing.T) {
	const window = time.Minute
	tests := []struct {
		name string
		at   time.Duration // forget's now, from t0
		max  int
		want []string
	}{
		{"nothing closed yet", 59 * time.Second, 10, []string{"a", "b", "c", "d"}},
		{"windows closing now go", time.Minute, 10, []string{"c", "d"}},
		{"at most max per call", 2 * time.Minute, 1, []string{"b", "c", "d"}},
		{"every closed window goes", 2 * time.Minute, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newView()
			v.open("a", t0)
			v.open("b", t0)
			v.open("c", t0.Add(30*time.Second))
			v.open("d", t0.Add(45*time.Second))
			v.forget(t0.Add(tt.at), window, tt.max)
			if got := keys(v); !slices.Equal(got, tt.want) {
				t.Errorf("got keys %q, want %q", got, tt.want)
			}
		})
	}
}

func TestViewForgetKeepsAReopenedWindow(t *testing.T) {
	const window = time.Minute
	v := newView()
	v.open("a", t0)
	v.open("a", t0.Add(time.Minute)) // the key came back after its window closed
	v.forget(t0.Add(90*time.Second), window, 10)
	w, ok := v.counts["a"]
	if !ok || !w.start.Equal(t0.Add(time.Minute)) {
		t.Errorf("got (%+v, %v), want a's open window from %v kept", w, ok, t0.Add(time.Minute))
	}
	v.forget(t0.Add(2*time.Minute), window, 10)
	if _, ok := v.counts["a"]; ok {
		t.Error("got a kept after its second window closed, want it let go")
	}
}

func TestViewMemoryFollowsLiveKeys(t *testing.T) {
	const window, n = time.Minute, 5000
	v := newView()
	for i := range n {
		v.open(fmt.Sprintf("k%d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	now := t0.Add(window + n*time.Millisecond)
	for range n / forgetPerHit {
		v.forget(now, window, forgetPerHit)
	}
	v.open("live", now)
	if len(v.counts) != 1 {
		t.Errorf("got %d keys in the view, want only the live one", len(v.counts))
	}
	if live := len(v.expiry) - v.head; live != 1 {
		t.Errorf("got %d pending expiry entries, want 1", live)
	}
	if len(v.expiry) > n/2 {
		t.Errorf("got an expiry list of %d entries for one live key, want it compacted", len(v.expiry))
	}
}

// TestLimiterForgetsClosedWindows checks the view through the limiter: after
// the windows close, hits on any key let the old keys go.
func TestLimiterForgetsClosedWindows(t *testing.T) {
	clock := porch.NewFakeClock(t0)
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "porch.db"), store.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{Size: 1})
	t.Cleanup(func() { pool.Close(context.Background()) })
	l, err := New(pool, st, 5, time.Minute, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		if _, err := l.Allow(ctx, fmt.Sprintf("old-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	for range 3 { // 3 hits × forgetPerHit >= 10
		if _, err := l.Allow(ctx, "new"); err != nil {
			t.Fatal(err)
		}
	}
	// Read the view on its actor, the only goroutine that may touch it.
	got, err := porch.Call(ctx, pool, "new", func(shard int, r porch.Reply[[]string]) {
		r.Send(keys(l.views[shard]), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new"}; !slices.Equal(got, want) {
		t.Errorf("got keys %q in the view, want %q", got, want)
	}
}
