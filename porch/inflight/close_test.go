package inflight_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// The frames of a shared limiter's goroutines: the one that renews its
// slots' leases, and the one that gives back failed acquires' slots.
const (
	renewLoop      = "porch/inflight.(*shared).renewLoop("
	releaseOrphans = "porch/inflight.(*shared).releaseOrphans("
)

// Close while a request holds a slot of a shared store: the renewing
// goroutine is gone once Close returns, an Acquire is refused with
// ErrClosed, and the holder's give-back still frees its slot.
func TestCloseWhileHeld(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			st, another := k.open(t)
			before, beforeOrphans := testkit.CountStacks(renewLoop), testkit.CountStacks(releaseOrphans)
			lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
			other := inflight.New(newPool(t, porch.PoolOptions{}), another(t), 1, inflight.Options{})
			t.Cleanup(func() { other.Close(context.Background()) })
			release, err := lim.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			if err := lim.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := lim.Close(context.Background()); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			testkit.WaitStacks(t, renewLoop, before+1, 10*time.Second) // other's loop runs on
			testkit.WaitStacks(t, releaseOrphans, beforeOrphans+1, 10*time.Second)
			if _, err := lim.Acquire(context.Background(), "bob"); !errors.Is(err, inflight.ErrClosed) {
				t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
			}
			if _, err := other.Acquire(context.Background(), "alice"); !errors.Is(err, inflight.ErrLimited) {
				t.Fatalf("another instance while the slot is held: %v, want ErrLimited", err)
			}
			release()
			rel, err := other.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatalf("after the give-back that followed Close: %v, want the slot", err)
			}
			rel()
		})
	}
}

// failingRenew fails its first fail renewals.
type failingRenew struct {
	driver.SharedSlots
	fail  int64
	calls *atomic.Int64
}

func (s failingRenew) RenewSlots(ctx context.Context, held []driver.SlotRef, lease time.Duration) (int, error) {
	if s.calls.Add(1) <= s.fail {
		return 0, errors.New("store out of reach")
	}
	return s.SharedSlots.RenewSlots(ctx, held, lease)
}

// lockedBuffer is a log sink safe for the renewing goroutine.
type lockedBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Renewals that fail for a while are logged, once per 10 s however many
// fail, and the slot, once renewals succeed again within its lease, is
// still held.
func TestRenewFailingLoggedBounded(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			st, another := k.open(t)
			var calls atomic.Int64
			logs := &lockedBuffer{}
			const lease = 3 * time.Second
			lim := inflight.New(newPool(t, porch.PoolOptions{}), failingRenew{st.(driver.SharedSlots), 1, &calls}, 1,
				inflight.Options{Lease: lease, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			t.Cleanup(func() { lim.Close(context.Background()) })
			other := inflight.New(newPool(t, porch.PoolOptions{}), another(t), 1, inflight.Options{})
			t.Cleanup(func() { other.Close(context.Background()) })
			release, err := lim.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			deadline := time.Now().Add(30 * time.Second)
			for calls.Load() < 4 { // one failed, then three renewed
				if time.Now().After(deadline) {
					t.Fatalf("%d renewals in 30s", calls.Load())
				}
				time.Sleep(50 * time.Millisecond) // polling the renewals
			}
			if _, err := other.Acquire(context.Background(), "alice"); !errors.Is(err, inflight.ErrLimited) {
				t.Fatalf("another instance after one failed renewal: %v, want ErrLimited", err)
			}
			if n := strings.Count(logs.String(), "could not renew"); n != 1 {
				t.Errorf("%d log lines about failed renewals, want 1:\n%s", n, logs)
			}
		})
	}
}

// Renewals that keep failing are logged once per 10 s, not once per
// renewal.
func TestRenewFailingLogOncePer10s(t *testing.T) {
	k := kinds[2] // postgres
	st, _ := k.open(t)
	var calls atomic.Int64
	logs := &lockedBuffer{}
	lim := inflight.New(newPool(t, porch.PoolOptions{}), failingRenew{st.(driver.SharedSlots), 1 << 40, &calls}, 1,
		inflight.Options{Lease: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() { lim.Close(context.Background()) })
	release, err := lim.Acquire(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	deadline := time.Now().Add(30 * time.Second)
	for calls.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 30s", calls.Load())
		}
		time.Sleep(20 * time.Millisecond) // polling the renewals
	}
	if n := strings.Count(logs.String(), "could not renew"); n != 1 {
		t.Errorf("%d log lines for %d failed renewals, want 1:\n%s", n, calls.Load(), logs)
	}
}

// closeDuring closes the limiter while an acquire's round trip is out:
// the store grants the slot after Close has stopped the renewals.
type closeDuring struct {
	driver.SharedSlots
	close func()
}

func (s closeDuring) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (bool, int64, error) {
	ok, held, err := s.SharedSlots.AcquireSlot(ctx, key, id, limit, lease)
	s.close()
	return ok, held, err
}

// An acquire granted while Close runs is refused with ErrClosed and its
// slot given back: nothing would renew it, so it would lapse under a
// request still running and let another instance's in past the limit.
func TestAcquireRacingClose(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			st, another := k.open(t)
			var lim *inflight.Limiter
			cd := closeDuring{st.(driver.SharedSlots), func() { lim.Close(context.Background()) }}
			lim = inflight.New(newPool(t, porch.PoolOptions{}), cd, 1, inflight.Options{})
			rel, err := lim.Acquire(context.Background(), "alice")
			if !errors.Is(err, inflight.ErrClosed) {
				if err == nil {
					rel()
				}
				t.Fatalf("Acquire granted as Close ran: %v, want ErrClosed", err)
			}
			other := inflight.New(newPool(t, porch.PoolOptions{}), another(t), 1, inflight.Options{})
			t.Cleanup(func() { other.Close(context.Background()) })
			deadline := time.Now().Add(5 * time.Second) // well inside the 10 s lease
			for {
				r, err := other.Acquire(context.Background(), "alice")
				if err == nil {
					r()
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the slot of the acquire refused at Close is still held: %v", err)
				}
				time.Sleep(10 * time.Millisecond) // polling the give-back
			}
		})
	}
}
