package kit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Close closes the limiters before the pool and the store: a limiter that
// wrote ahead leaves its exact count behind, which a Kit reopened on the
// same file resumes. Closed in the wrong order by hand (store first), the
// count is lost or the close fails.
func TestCloseLeavesExactCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	k := kit.Must(kit.Open(sqlite.Open(path, sqlite.Options{})))
	lim, err := k.Limiter(10, time.Hour, rate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if v, err := lim.Allow(context.Background(), "alice"); err != nil || !v.Allowed {
			t.Fatalf("Allow: %+v, %v", v, err)
		}
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := k.Close(context.Background()); !errors.Is(err, porch.ErrClosed) {
		t.Errorf("second Close: %v, want porch.ErrClosed", err)
	}
	if _, err := k.Limiter(10, time.Hour, rate.Options{}); !errors.Is(err, porch.ErrClosed) {
		t.Errorf("Limiter after Close: %v, want porch.ErrClosed", err)
	}

	k2 := kit.Must(kit.Open(sqlite.Open(path, sqlite.Options{})))
	defer k2.Close(context.Background())
	lim2, err := k2.Limiter(10, time.Hour, rate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := lim2.Peek(context.Background(), "alice")
	if err != nil || v.Remaining != 5 {
		// Written ahead, the stored bound is 7 (Remaining 3) until the
		// limiter's Close writes the exact 5.
		t.Errorf("after reopening: Remaining %d (%v), want 5: the exact count of 5", v.Remaining, err)
	}
}

// Open passes a driver's error through, and Must panics with it.
func TestOpenPassesTheDriversError(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing", "dir", "app.db")
	_, err := kit.Open(sqlite.Open(bad, sqlite.Options{}))
	if err == nil {
		t.Fatal("Open on an unopenable path: nil error")
	}
	defer func() {
		if p, _ := recover().(string); !strings.Contains(p, err.Error()) {
			t.Errorf("Must panicked with %q, want the driver's error %q", p, err)
		}
	}()
	kit.Must(kit.Open(sqlite.Open(bad, sqlite.Options{})))
}

// A Kit without keys refuses idempotency with ErrNoStore, one without
// counters refuses limiters; New with both on one store closes it once.
func TestNewWithoutAStore(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	counters := kit.New(porch.NewPool(porch.PoolOptions{}), st, nil)
	if p := panicOf(func() { counters.Idempotency(idem.Options{}) }); !errors.Is(p, kit.ErrNoStore) {
		t.Errorf("Idempotency without keys: panicked with %v, want kit.ErrNoStore", p)
	}
	keys := kit.New(porch.NewPool(porch.PoolOptions{}), nil, st)
	if _, err := keys.Limiter(1, time.Minute, rate.Options{}); !errors.Is(err, kit.ErrNoStore) {
		t.Errorf("Limiter without counters: %v, want kit.ErrNoStore", err)
	}
	if err := keys.Close(context.Background()); err != nil {
		t.Errorf("close the keys kit: %v", err)
	}
	if err := counters.Close(context.Background()); err == nil {
		t.Log("the store closed twice without an error") // sqlite.Store.Close is idempotent
	}
	both := kit.Must(kit.Open(sqlite.Open(filepath.Join(t.TempDir(), "b.db"), sqlite.Options{})))
	m := both.Idempotency(idem.Options{})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(201) }))
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("Idempotency-Key", "k1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 201 {
		t.Errorf("through the kit's idempotency: %d, want 201", rec.Code)
	}
	if err := both.Close(context.Background()); err != nil {
		t.Errorf("Close of a kit whose one store is both: %v, want it closed once", err)
	}
}

// panicOf runs f and returns the error it panicked with, or nil.
func panicOf(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err, _ = p.(error)
			if err == nil {
				err = fmt.Errorf("%v", p)
			}
		}
	}()
	f()
	return nil
}
