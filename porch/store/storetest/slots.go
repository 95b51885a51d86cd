package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// SlotsHarness is how TestSlots reaches a driver whose slots several
// processes share (driver.SharedSlots): as [Harness], a fresh database
// per test and a way to open a store on it, twice at once for two
// instances.
type SlotsHarness struct {
	DB   func(t *testing.T) string
	Open func(t *testing.T, db string) driver.SharedSlots
}

// TestSlots runs the in-flight slots suite over h's stores: acquires of
// one key are exact under concurrency across two stores, a release frees
// its slot, a renewed lease outlives its length, and an expired one is
// taken back by the next acquire.
func TestSlots(t *testing.T, h SlotsHarness) {
	if h.DB == nil || h.Open == nil {
		t.Fatal("storetest: SlotsHarness needs DB and Open")
	}
	open := func(t *testing.T, db string) driver.SharedSlots {
		t.Helper()
		st := h.Open(t, db)
		if !st.SlotsShared() {
			t.Fatalf("%T implements driver.SharedSlots but SlotsShared reports false", st)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		return st
	}
	t.Run("ExactAcrossInstances", func(t *testing.T) { testSlotsExact(t, h, open) })
	t.Run("ReleaseFrees", func(t *testing.T) { testSlotsRelease(t, h, open) })
	t.Run("RenewOutlivesLease", func(t *testing.T) { testSlotsRenew(t, h, open) })
	t.Run("ExpiredLeaseTakenBack", func(t *testing.T) { testSlotsExpiry(t, h, open) })
	t.Run("AnyKeyBytes", func(t *testing.T) { testSlotsKeyBytes(t, h, open) })
}

type openSlots func(t *testing.T, db string) driver.SharedSlots

func acquireSlot(t *testing.T, st driver.SharedSlots, key, id string, limit int64, lease time.Duration) (bool, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ok, held, err := st.AcquireSlot(ctx, key, id, limit, lease)
	if err != nil {
		t.Fatalf("AcquireSlot(%q, %q): %v", key, id, err)
	}
	return ok, held
}

func releaseSlot(t *testing.T, st driver.SharedSlots, key, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := st.ReleaseSlot(ctx, key, id); err != nil {
		t.Fatalf("ReleaseSlot(%q, %q): %v", key, id, err)
	}
}

// Of limit+k acquires of one key sent at once through two stores, each
// round exactly limit are taken: none refused while a slot is free, none
// taken past the limit.
func testSlotsExact(t *testing.T, h SlotsHarness, open openSlots) {
	db := h.DB(t)
	stores := []driver.SharedSlots{open(t, db), open(t, db)}
	const limit, tries, rounds = 3, 12, 5
	for round := range rounds {
		key := fmt.Sprintf("inflight:exact:p:round-%d", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var taken []string
		var errs []error
		for i := range tries {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("holder-%d", i)
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				ok, held, err := stores[i%2].AcquireSlot(ctx, key, id, limit, time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case ok && (held < 1 || held > limit):
					errs = append(errs, fmt.Errorf("acquire %s took a slot with held %d, want 1 to %d", id, held, limit))
				case ok:
					taken = append(taken, id)
				case held != limit:
					errs = append(errs, fmt.Errorf("acquire %s refused with held %d, want %d", id, held, limit))
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		if len(taken) != limit {
			t.Fatalf("round %d: %d of %d concurrent acquires took a slot, want exactly %d", round, len(taken), tries, limit)
		}
	}
}

// A released slot is free for the next acquire; releasing a slot not
// held is no error.
func testSlotsRelease(t *testing.T, h SlotsHarness, open openSlots) {
	st := open(t, h.DB(t))
	const key = "inflight:release:p:alice"
	if ok, held := acquireSlot(t, st, key, "a", 1, time.Minute); !ok || held != 1 {
		t.Fatalf("first acquire: ok %v, held %d; want true, 1", ok, held)
	}
	if ok, held := acquireSlot(t, st, key, "b", 1, time.Minute); ok || held != 1 {
		t.Fatalf("second acquire of a limit of 1: ok %v, held %d; want false, 1", ok, held)
	}
	releaseSlot(t, st, key, "a")
	releaseSlot(t, st, key, "a")
	releaseSlot(t, st, key, "never-taken")
	if ok, held := acquireSlot(t, st, key, "b", 1, time.Minute); !ok || held != 1 {
		t.Fatalf("acquire after the release: ok %v, held %d; want true, 1", ok, held)
	}
}

// A slot renewed every tenth of its lease is still held long after the
// lease's length; a renewal of an expired slot reports it lost.
func testSlotsRenew(t *testing.T, h SlotsHarness, open openSlots) {
	st := open(t, h.DB(t))
	const key = "inflight:renew:p:alice"
	const lease = time.Second
	if ok, _ := acquireSlot(t, st, key, "a", 1, lease); !ok {
		t.Fatal("first acquire refused")
	}
	refs := []driver.SlotRef{{Key: key, ID: "a"}}
	until := time.Now().Add(3 * lease)
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		lost, err := st.RenewSlots(ctx, refs, lease)
		cancel()
		if err != nil || lost != 0 {
			t.Fatalf("RenewSlots: lost %d, %v; want 0, nil", lost, err)
		}
		if ok, _ := acquireSlot(t, st, key, "b", 1, lease); ok {
			t.Fatal("an acquire took the slot of a holder that renews its lease")
		}
		time.Sleep(lease / 10) // the renewal's pace, not a synchronisation
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if lost, err := st.RenewSlots(ctx, []driver.SlotRef{{Key: key, ID: "never-taken"}}, lease); err != nil || lost != 1 {
		t.Fatalf("RenewSlots of a slot not held: lost %d, %v; want 1, nil", lost, err)
	}
}

// A holder that stops renewing loses its slot once its lease has run
// out, on the store's clock, and not before.
func testSlotsExpiry(t *testing.T, h SlotsHarness, open openSlots) {
	st := open(t, h.DB(t))
	const key = "inflight:expiry:p:alice"
	const lease = 500 * time.Millisecond
	taken := time.Now()
	if ok, _ := acquireSlot(t, st, key, "dead", 1, lease); !ok {
		t.Fatal("first acquire refused")
	}
	if ok, _ := acquireSlot(t, st, key, "b", 1, lease); ok && time.Since(taken) < lease/2 {
		t.Fatal("an acquire took a slot whose lease had not run out")
	}
	deadline := time.Now().Add(lease + 20*time.Second)
	for {
		if ok, held := acquireSlot(t, st, key, "b", 1, lease); ok {
			if held != 1 {
				t.Errorf("acquire after the expiry: held %d, want 1 (the dead holder's slot counted)", held)
			}
			t.Logf("the dead holder's slot was taken back %s after it was taken (lease %s)", time.Since(taken).Round(time.Millisecond), lease)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a holder that stopped renewing was still held %s after its lease of %s", time.Since(taken), lease)
		}
		time.Sleep(20 * time.Millisecond) // polling the store's clock
	}
}

// A key is any bytes: NUL, invalid UTF-8, braces, a key longer than any
// index takes.
func testSlotsKeyBytes(t *testing.T, h SlotsHarness, open openSlots) {
	st := open(t, h.DB(t))
	for _, key := range []string{"inflight:k:p:\x00\xff{}", "inflight:k:p:" + strings.Repeat("é", 2000)} {
		if ok, _ := acquireSlot(t, st, key, "a", 1, time.Minute); !ok {
			t.Fatalf("acquire of %.20q refused", key)
		}
		if ok, _ := acquireSlot(t, st, key, "b", 1, time.Minute); ok {
			t.Fatalf("second acquire of %.20q took a slot past the limit", key)
		}
		releaseSlot(t, st, key, "a")
		if ok, _ := acquireSlot(t, st, key, "b", 1, time.Minute); !ok {
			t.Fatalf("acquire of %.20q after its release refused", key)
		}
	}
}
