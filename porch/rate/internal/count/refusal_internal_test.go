package count

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// onActor runs fn on shard's actor and waits for it.
func onActor(t *testing.T, pool *actor.Pool, shard int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	if err := pool.SendShard(shard, true, func(int) { fn(); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
}

// refusingStore is a shared store whose every key is over its limit: each
// hit is refused at once, for a window from now. It counts its trips, so
// that a test can tell a refusal answered from the cache from one the
// store gave.
type refusingStore struct {
	trips atomic.Int64
}

var _ driver.SharedCounters = (*refusingStore)(nil)

func (s *refusingStore) Wall() time.Time              { return t0 }
func (s *refusingStore) Health(context.Context) error { return nil }
func (s *refusingStore) Stats() store.Stats           { return store.Stats{} }
func (s *refusingStore) Close(context.Context) error  { return nil }

func (s *refusingStore) ClaimPolicy(context.Context, driver.Policy) (func(), error) {
	return func() {}, nil
}

func (s *refusingStore) AddHit(_ string, rule driver.Rule, _ int64, _ driver.Lease, done func(driver.Hit, error)) error {
	s.trips.Add(1)
	full := driver.State{Start: t0, Count: rule.(algorithm.Rule).Limit()}
	done(driver.Hit{State: full, Now: t0}, nil)
	return nil
}

func (s *refusingStore) GiveBack(string, driver.Lease, func(error)) error           { return nil }
func (s *refusingStore) PeekHit(string, driver.Rule, func(driver.Hit, error)) error { return nil }
func (s *refusingStore) ResetHit(string, func(error)) error                         { return nil }
func (s *refusingStore) TakeBack(string, time.Time, int64, func(error)) error       { return nil }

// refusingLimiter is the counter of a limiter of one request an hour on a
// refusingStore, its refusals cached for life, counted by actors actors.
func refusingLimiter(t *testing.T, actors int, life time.Duration) (*engine, *refusingStore) {
	t.Helper()
	pool := newPool(t, actors)
	st := &refusingStore{}
	return open(t, pool, NewShared(testConfig(t, pool, 1, time.Hour), st, 0, life)), st
}

// mustRefuse counts one hit to key and fails t unless it is refused.
func mustRefuse(t *testing.T, l *engine, key string) {
	t.Helper()
	v, err := l.allow(context.Background(), key, 1)
	if err != nil || v.Allowed {
		t.Fatalf("allow(%.16q): got %+v, %v, want a refusal", key, v, err)
	}
}

// drainActors waits until every job queued on l's actors so far has run:
// the refusals the store's answers queued are remembered by then.
func drainActors(t *testing.T, l *engine) {
	t.Helper()
	for shard := range l.pool.Size() {
		onActor(t, l.pool, shard, func() {})
	}
}

// refusalsHeld is how many refusals l's cache holds, read on each actor.
func refusalsHeld(t *testing.T, l *engine) int {
	t.Helper()
	c := l.c.(*refusals)
	held := 0
	for shard := range l.pool.Size() {
		onActor(t, l.pool, shard, func() { held += len(c.shards[shard].m) })
	}
	return held
}

// setRefusalClock times l's refusal cache by c. Call it before l counts.
func setRefusalClock(l *engine, c clock.Clock) { l.c.(*refusals).clock = c }

// sweepRefusals runs, on each of l's actors, the sweep its timer sends.
func sweepRefusals(t *testing.T, l *engine) {
	t.Helper()
	c := l.c.(*refusals)
	for shard := range l.pool.Size() {
		onActor(t, l.pool, shard, func() { c.sweep(shard) })
	}
}

// refusalTimersArmed counts the actors of l with a sweep on its way.
func refusalTimersArmed(t *testing.T, l *engine) int {
	t.Helper()
	c := l.c.(*refusals)
	armed := 0
	for shard := range l.pool.Size() {
		onActor(t, l.pool, shard, func() {
			if c.shards[shard].armed {
				armed++
			}
		})
	}
	return armed
}

// heapAlloc is the live heap after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A principal is arbitrary bytes a client may choose (an unverified
// header, a login name), so the refusal cache must cost memory by the
// refusal, not by the key: 40,000 refused keys of 2 KB each stay within
// the cache's budget, and once the cache's life has passed with no more
// traffic the sweep gives the memory back.
func TestRefusalCacheMemoryBoundedAndReleased(t *testing.T) {
	const keys, keyBytes = 40_000, 2048
	clk := &stepClock{wall: t0}
	l, _ := refusingLimiter(t, 4, time.Hour)
	setRefusalClock(l, clk)
	pad := strings.Repeat("k", keyBytes-8)
	mustRefuse(t, l, "warm-up") // the limiter's own allocations, before the baseline
	drainActors(t, l)
	base := heapAlloc()
	for i := range keys {
		mustRefuse(t, l, fmt.Sprintf("%08d", i)+pad)
	}
	drainActors(t, l)
	const most = 6 << 20 // the cache's budget, 4 MiB, with room for the rest of the heap's noise
	grown := heapAlloc() - base
	held := refusalsHeld(t, l)
	t.Logf("%d refused keys of %d bytes: heap grew by %.1f MiB; the cache holds %d refusals, %d bytes each",
		keys, keyBytes, float64(grown)/(1<<20), held, grown/int64(max(held, 1)))
	if grown > most {
		t.Errorf("%d refused keys of %d bytes grew the heap by %.1f MiB, want at most %.1f MiB",
			keys, keyBytes, float64(grown)/(1<<20), float64(most)/(1<<20))
	}

	clk.Advance(time.Hour) // every refusal has expired; no request comes
	sweepRefusals(t, l)
	const left = 256 << 10
	after := heapAlloc() - base
	t.Logf("once expired and swept: %.1f KiB above the baseline; the cache holds %d", float64(after)/(1<<10), refusalsHeld(t, l))
	if after > left {
		t.Errorf("once every refusal expired and was swept, the heap is %.1f KiB above its baseline, want at most %d KiB",
			float64(after)/(1<<10), left>>10)
	}
	runtime.KeepAlive(l)
}

// A burst of refusals followed by silence must not leave the cache
// holding them: no request comes to sweep them, so the cache sweeps itself
// once they have expired.
func TestRefusalCacheSweptWithoutTraffic(t *testing.T) {
	l, _ := refusingLimiter(t, 2, 20*time.Millisecond)
	for i := range 100 {
		mustRefuse(t, l, fmt.Sprintf("burst-%d", i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		held := refusalsHeld(t, l)
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after a burst whose refusals live 20ms, with no traffic since, the cache still holds %d of them", held)
		}
		time.Sleep(5 * time.Millisecond) // polling a probe, not waiting for an event
	}
}

// Close lets go of every cached refusal and stops the cache's sweeping:
// a closed limiter holds no memory for refusals nor any timer that would
// wake to sweep them.
func TestRefusalCacheLetGoByClose(t *testing.T) {
	l, _ := refusingLimiter(t, 2, time.Hour)
	for i := range 100 {
		mustRefuse(t, l, fmt.Sprintf("k%d", i))
	}
	drainActors(t, l)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := refusalsHeld(t, l); held != 0 {
		t.Errorf("after Close the cache holds %d refusals, want 0", held)
	}
	if armed := refusalTimersArmed(t, l); armed != 0 {
		t.Errorf("after Close %d shards still have a sweep armed, want 0", armed)
	}
}

// A shard at its budget keeps remembering new refusals, letting an older
// one go: a burst of many keys must not switch the cache off for the keys
// refused after it, which would cost the store a round trip for each of
// their requests until the burst's entries expire.
func TestRefusalCacheRemembersPastItsBudget(t *testing.T) {
	l, st := refusingLimiter(t, 1, time.Hour)
	for i := range 70_000 { // past any shard's budget
		mustRefuse(t, l, fmt.Sprintf("burst-%d", i))
	}
	mustRefuse(t, l, "fresh")
	drainActors(t, l)
	before := st.trips.Load()
	mustRefuse(t, l, "fresh")
	if trips := st.trips.Load() - before; trips != 0 {
		t.Errorf("a key refused after a burst filled the cache was asked of the store %d more times, want 0 (answered from the cache)", trips)
	}
}
