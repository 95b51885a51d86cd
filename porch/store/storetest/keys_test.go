package storetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// brokenEnv names the broken store TestKeysOnBrokenStore runs the suite
// on, in the child process TestKeysCatchesBrokenStores starts.
const brokenEnv = "STORETEST_BROKEN_KEYS"

// brokenStores are stores that each break one promise of driver.KeyStore, and
// the suite's cases that must catch it. "none" breaks nothing: the
// harness itself passes.
var brokenStores = []struct {
	name     string
	caughtBy []string
}{
	{"none", nil},
	{"dropsSave", []string{"RoundTrip", "Durable"}},
	{"forgetsOnRestart", []string{"Durable"}},
	{"admitsTwo", []string{"Exclusive"}},
	{"keepsKeyOnRelease", []string{"Release"}},
	{"ignoresFailedWrite", []string{"OwnerWrites"}},
	{"servesExpired", []string{"Expiry"}},
	{"inspectsHeld", []string{"InspectForget"}},
	{"forgetsNothing", []string{"InspectForget"}},
	{"noErrReleased", []string{"Ended"}},
	{"sharesSlices", []string{"Copies"}},
	{"panicsOnNUL", []string{"AnyBytes"}},
	{"truncatesKeys", []string{"AnyBytes"}},
}

// Each broken store fails the suite, in the cases meant to catch it; the
// suite runs in a child process, since a failing run would fail this one.
func TestKeysCatchesBrokenStores(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per broken store")
	}
	for _, b := range brokenStores {
		t.Run(b.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestKeysOnBrokenStore$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+b.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case b.caughtBy == nil && err != nil:
				t.Fatalf("the suite failed a store that breaks nothing (%v):\n%s", err, out)
			case b.caughtBy == nil:
				return
			case err == nil:
				t.Fatalf("the suite passed a store broken as %s:\n%s", b.name, out)
			case !errors.As(err, &exit):
				t.Fatalf("run the suite: %v", err)
			}
			for _, c := range b.caughtBy {
				if !strings.Contains(string(out), "--- FAIL: TestKeysOnBrokenStore/"+c+" ") {
					t.Errorf("a store broken as %s: the suite's %s case did not fail:\n%s", b.name, c, out)
				}
			}
		})
	}
}

// TestKeysOnBrokenStore runs the suite on the broken store brokenEnv
// names; it is skipped unless TestKeysCatchesBrokenStores started it.
func TestKeysOnBrokenStore(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestKeysCatchesBrokenStores")
	}
	dbs := map[string]*memory.Store{}
	var mu sync.Mutex
	storetest.TestKeys(t, storetest.KeysHarness{
		// A database is a memory store that outlives the stores the suite
		// opens on it: their Close leaves it open, so that a restart finds
		// what was saved before it.
		DB: func(t *testing.T) string {
			st, err := memory.Open()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			mu.Lock()
			defer mu.Unlock()
			dbs[t.Name()] = st
			return t.Name()
		},
		Open: func(t *testing.T, db string) driver.KeyStore {
			mu.Lock()
			st := dbs[db]
			mu.Unlock()
			if name == "forgetsOnRestart" {
				fresh, err := memory.Open()
				if err != nil {
					t.Fatal(err)
				}
				return &broken{Store: fresh, how: name}
			}
			return &broken{Store: st, how: name}
		},
	})
}

// broken is a memory store that breaks the promise how names.
type broken struct {
	*memory.Store
	how string

	mu    sync.Mutex                 // protects saved
	saved map[string]driver.Response // sharesSlices: what Save was given, as given
}

// Close leaves the database open (see TestKeysOnBrokenStore).
func (b *broken) Close(context.Context) error { return nil }

func (b *broken) key(key string) string {
	if b.how == "truncatesKeys" && len(key) > 256 {
		return key[:256]
	}
	return key
}

func (b *broken) Reserve(ctx context.Context, key string) (driver.Reservation, error) {
	if b.how == "panicsOnNUL" && strings.Contains(key, "\x00") {
		panic("a C string ends at the first NUL")
	}
	if b.how == "admitsTwo" {
		free, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		r, err := b.Store.Reserve(free, b.key(key))
		if err != nil {
			return &brokenReservation{b: b, key: key}, nil // a second owner, holding nothing
		}
		return &brokenReservation{Reservation: r, b: b, key: key}, nil
	}
	r, err := b.Store.Reserve(ctx, b.key(key))
	if err != nil {
		return nil, err
	}
	return &brokenReservation{Reservation: r, b: b, key: key}, nil
}

func (b *broken) Inspect(ctx context.Context, key string) (driver.Response, bool, error) {
	if b.how == "sharesSlices" {
		b.mu.Lock()
		res, ok := b.saved[key]
		b.mu.Unlock()
		if ok {
			return res, true, nil
		}
	}
	res, ok, err := b.Store.Inspect(ctx, b.key(key))
	if b.how == "inspectsHeld" && errors.Is(err, store.ErrKeyHeld) {
		return driver.Response{}, false, nil
	}
	res.Key = key
	return res, ok, err
}

func (b *broken) Forget(ctx context.Context, key string) error {
	switch {
	case b.how == "forgetsNothing":
		return nil
	case b.how == "inspectsHeld":
		if err := b.Store.Forget(ctx, key); !errors.Is(err, store.ErrKeyHeld) {
			return err
		}
		return nil
	}
	return b.Store.Forget(ctx, b.key(key))
}

// brokenReservation is a reservation of a broken store; a nil Reservation
// is admitsTwo's second owner, which holds nothing.
type brokenReservation struct {
	driver.Reservation
	b     *broken
	key   string
	ended bool
}

func (r *brokenReservation) Load(ctx context.Context) (driver.Response, bool, error) {
	if r.Reservation == nil || (r.ended && r.b.how == "noErrReleased") {
		return driver.Response{}, false, nil
	}
	if r.b.how == "sharesSlices" {
		r.b.mu.Lock()
		res, ok := r.b.saved[r.key]
		r.b.mu.Unlock()
		if ok {
			return res, true, nil
		}
	}
	res, ok, err := r.Reservation.Load(ctx)
	res.Key = r.key
	return res, ok, err
}

func (r *brokenReservation) Exec(ctx context.Context, query string, args ...any) error {
	if r.Reservation == nil || r.b.how == "ignoresFailedWrite" || (r.ended && r.b.how == "noErrReleased") {
		return nil
	}
	return r.Reservation.Exec(ctx, query, args...)
}

func (r *brokenReservation) Save(ctx context.Context, res driver.Response, ttl time.Duration) error {
	switch {
	case r.Reservation == nil || (r.ended && r.b.how == "noErrReleased"):
		return nil
	case r.b.how == "dropsSave":
		r.Reservation.Release()
		r.ended = true
		return nil
	case r.b.how == "servesExpired":
		ttl *= 1000
	case r.b.how == "ignoresFailedWrite":
		r.Reservation.Release()
		if rr, err := r.b.Store.Reserve(ctx, r.key); err == nil {
			r.Reservation = rr // a fresh one, with no failed write on it
		}
	case r.b.how == "sharesSlices":
		r.b.mu.Lock()
		if r.b.saved == nil {
			r.b.saved = map[string]driver.Response{}
		}
		res.Key = r.key
		r.b.saved[r.key] = res
		r.b.mu.Unlock()
	}
	r.ended = true
	return r.Reservation.Save(ctx, res, ttl)
}

func (r *brokenReservation) Release() {
	r.ended = true
	if r.Reservation == nil || r.b.how == "keepsKeyOnRelease" {
		return
	}
	r.Reservation.Release()
}
