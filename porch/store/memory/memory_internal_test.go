package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

var start = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

func openFake(t *testing.T) (*Store, *porchtest.FakeClock) {
	t.Helper()
	clk := porchtest.NewFakeClock(start)
	st, err := Open(Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st, clk
}

func saveResponse(t *testing.T, st *Store, key string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	r, err := st.Reserve(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if err := r.Save(ctx, driver.Response{Status: 200, Body: []byte(key)}, ttl); err != nil {
		t.Fatal(err)
	}
}

func saveCounter(t *testing.T, st *Store, key string, window time.Duration) {
	t.Helper()
	var got error = errors.New("done not called")
	if err := st.SaveCounter(driver.Counter{Key: key, State: driver.State{Start: st.Now(), Count: 1}, Window: window}, func(err error) { got = err }); err != nil {
		t.Fatal(err)
	}
	if got != nil {
		t.Fatalf("SaveCounter's done: %v, want nil before it returns", got)
	}
}

// What the package doc promises: a store opened after another closed
// starts empty, and a closed store refuses every call with
// store.ErrClosed.
func TestOpenStartsEmptyAndCloseRefuses(t *testing.T) {
	ctx := context.Background()
	st, _ := openFake(t)
	saveResponse(t, st, "k", time.Hour)
	saveCounter(t, st, "rate:default:p", time.Hour)
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
	for name, err := range map[string]error{
		"Health":       st.Health(ctx),
		"SaveCounter":  st.SaveCounter(driver.Counter{Key: "x", State: driver.State{Start: st.Now()}, Window: time.Hour}, nil),
		"LoadCounters": st.LoadCounters(ctx, st.Now(), func(driver.Counter) {}),
		"Forget":       st.Forget(ctx, "k"),
		"Reserve":      func() error { _, err := st.Reserve(ctx, "k"); return err }(),
		"Inspect":      func() error { _, _, err := st.Inspect(ctx, "k"); return err }(),
		"ClaimPolicy": func() error {
			_, err := st.ClaimPolicy(ctx, driver.Policy{Name: "x", Limit: 1, Window: time.Hour})
			return err
		}(),
	} {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want store.ErrClosed", name, err)
		}
	}

	next, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close(ctx)
	if _, ok, err := next.Inspect(ctx, "k"); ok || err != nil {
		t.Errorf("a new store: Inspect found %v (%v), want nothing kept from the closed one", ok, err)
	}
	n := 0
	next.LoadCounters(ctx, next.Now(), func(driver.Counter) { n++ })
	if n != 0 {
		t.Errorf("a new store: %d counters, want none kept from the closed one", n)
	}
	if _, err := Open(Options{}, Options{}); err == nil {
		t.Error("Open with two Options: accepted, want an error")
	}
}

// An owner's Exec fails with store.ErrWriteFailed, saying why, and takes
// its Save with it, counted as a failed commit.
func TestExecRunsNoSQL(t *testing.T) {
	ctx := context.Background()
	st, _ := openFake(t)
	r, err := st.Reserve(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	err = r.Exec(ctx, "INSERT INTO orders (id) VALUES (1)")
	if !errors.Is(err, store.ErrWriteFailed) || !errors.Is(err, errNoSQL) {
		t.Errorf("Exec: %v, want store.ErrWriteFailed and errNoSQL", err)
	}
	if err := r.Save(ctx, driver.Response{Status: 201}, time.Hour); !errors.Is(err, store.ErrWriteFailed) {
		t.Errorf("Save after Exec: %v, want store.ErrWriteFailed", err)
	}
	if _, ok, _ := st.Inspect(ctx, "k"); ok {
		t.Error("Inspect after a failed Save: a response, want none")
	}
	if s := st.Stats(); s.Failed != 1 || s.Commits != 0 {
		t.Errorf("Stats %+v, want 1 failed and 0 commits", s)
	}
}

// Expired counters and responses leave memory as later writes pass, and
// a key written on every hit keeps one place in the expiry queue.
func TestExpiredEntriesLeave(t *testing.T) {
	st, clk := openFake(t)
	const n = 200
	for i := range n {
		saveCounter(t, st, fmt.Sprint("rate:default:", i), time.Minute)
		saveResponse(t, st, fmt.Sprint("idem:", i), time.Minute)
	}
	for range 1000 {
		saveCounter(t, st, "rate:default:hot", time.Hour)
	}
	st.d.mu.Lock()
	queued := len(st.d.expiry)
	st.d.mu.Unlock()
	if queued != 2*n+1 {
		t.Errorf("%d keys, one written 1000 times: %d queued expiries, want %d (one per key)", 2*n+1, queued, 2*n+1)
	}

	clk.Advance(2 * time.Minute)
	// Each write drops up to expireEach: enough writes to pass them all.
	for range (2*n + expireEach - 1) / expireEach {
		saveCounter(t, st, "rate:default:hot", time.Hour)
	}
	st.d.mu.Lock()
	counters, responses := len(st.d.counters), len(st.d.responses)
	st.d.mu.Unlock()
	if counters != 1 || responses != 0 {
		t.Errorf("after the windows and TTLs ended: %d counters and %d responses in memory, want only the hot key's counter", counters, responses)
	}
}

// Now moves with the monotonic clock, not with a wall clock set back.
func TestNowIgnoresWallJumps(t *testing.T) {
	st, clk := openFake(t)
	before := st.Now()
	clk.Jump(-time.Hour)
	clk.Advance(time.Second)
	if got := st.Now().Sub(before); got != time.Second {
		t.Errorf("Now moved %v after the wall clock went back an hour and a second passed, want 1s", got)
	}
	if got := st.Wall(); !got.Equal(start.Add(-time.Hour + time.Second)) {
		t.Errorf("Wall %v, want the wall clock, %v", got, start.Add(-time.Hour+time.Second))
	}
}

// Health is nil while open; Stats counts each write as one commit.
func TestHealthAndStats(t *testing.T) {
	ctx := context.Background()
	st, _ := openFake(t)
	if err := st.Health(ctx); err != nil {
		t.Errorf("Health of an open store: %v", err)
	}
	saveCounter(t, st, "rate:default:p", time.Hour)
	saveResponse(t, st, "k", time.Hour)
	if err := st.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if s := st.Stats(); s.Commits != 3 || s.Writes != 3 || s.Failed != 0 {
		t.Errorf("Stats after three writes: %+v, want 3 commits of 3 writes", s)
	}
}

// With no further call, a store lets go of the counters and responses
// whose windows and TTLs have ended, and of the room they took: a limiter
// in front of it writes a busy key seldom (it writes ahead) and a refused
// one never, so expiring only as writes pass would keep a burst of keys in
// memory for good. The expiry queue's capacity stands in for the maps',
// which Go does not report.
//
// The clock is fake and stands still while the burst is written, so that
// every entry is in memory at once however slowly the writes go: on the
// system clock a loaded machine wrote them slower than they expired, the
// store never held shrinkFrom at once, and rightly kept its room. The
// sweep's timer is real, so the test then waits for what it checks.
func TestIdleStoreLetsExpiredEntriesGo(t *testing.T) {
	st, clk := openFake(t)
	const n = 2000
	for i := range n {
		saveCounter(t, st, fmt.Sprint("rate:default:", i), 10*time.Millisecond)
		saveResponse(t, st, fmt.Sprint("idem:", i), 10*time.Millisecond)
	}
	st.d.mu.Lock()
	held := len(st.d.counters) + len(st.d.responses)
	st.d.mu.Unlock()
	if held != 2*n {
		t.Fatalf("a burst of %d entries written at one instant: %d in memory, want all", 2*n, held)
	}
	clk.Advance(time.Minute)
	var counters, responses, queued, room int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st.d.mu.Lock()
		counters, responses, queued, room = len(st.d.counters), len(st.d.responses), len(st.d.expiry), cap(st.d.expiry)
		st.d.mu.Unlock()
		if counters+responses+queued == 0 && room < shrinkFrom {
			return
		}
	}
	t.Errorf("30s after %d counters' windows and %d responses' TTLs ended, with no further call: %d counters, %d responses and %d queued expiries (room for %d) still in memory, want none (room for fewer than %d)",
		n, n, counters, responses, queued, room, shrinkFrom)
}
