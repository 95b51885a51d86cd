package kit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Probes: a second kit on one file, middleware used after Close, the Limit
// panic message.
func TestKitProbes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	k := kit.Must(kit.Open(sqlite.Open(path, store.Options{})))
	if _, err := kit.Open(sqlite.Open(path, store.Options{})); err == nil {
		t.Errorf("a second kit on the same file opened")
	} else {
		t.Logf("second opener: %v", err)
	}
	lim, err := k.Limiter(5, time.Minute, rate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := k.Idempotency(idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	limit := k.Limit(5, time.Minute)
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("served")) })
	for name, h := range map[string]http.Handler{"limiter": lim.Handler(ok), "limit": limit(ok), "idem": keys.Handler(ok)} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k1")
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panicked: %v", name, p)
				}
			}()
			h.ServeHTTP(rec, req)
		}()
		if rec.Code < 500 {
			t.Errorf("%s after Close: got %d %q, want a fail-closed 5xx", name, rec.Code, rec.Body)
		}
	}
	func() {
		defer func() { t.Logf("Limit on a closed kit panics: %v", recover()) }()
		k.Limit(5, time.Minute)
	}()
}

// Two routes each mounting k.Limit(5, time.Minute), the kit's one-liner:
// both limiters are "default" under one policy on one SQLite file, so the
// store accepts both. They keep separate counts in memory but write the
// same row: one client is served 5 on each route, and after a restart
// the row holds whichever wrote last, so the 5 served on /a are lost and
// /a serves 4 more within the same minute (9 of a limit of 5). On
// PostgreSQL the same two limiters share one count.
func TestTwoLimitsCountApartAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	k := kit.Must(kit.Open(sqlite.Open(path, store.Options{})))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	a, b := k.Limit(5, time.Minute)(ok), k.Limit(5, time.Minute)(ok)
	hit := func(h http.Handler) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.7:1"
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	servedA := 0
	for range 5 {
		if hit(a) == 200 {
			servedA++
		}
	}
	servedB := 0
	if hit(b) == 200 {
		servedB++
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	k2 := kit.Must(kit.Open(sqlite.Open(path, store.Options{})))
	defer k2.Close(context.Background())
	a2 := k2.Limit(5, time.Minute)(ok)
	for range 5 {
		if hit(a2) == 200 {
			servedA++
		}
	}
	// Each Limit is a limit of its own (limit1 on /a, limit2 on /b), and
	// the restarted limit1 resumes /a's count: /a serves 5 in all. Before,
	// both were "default" on one SQLite file, counted apart in memory and
	// overwrote each other's row, so /a served 4 more after the restart.
	if servedA != 5 || servedB != 1 {
		t.Errorf("served %d on /a (want 5, across a restart) and %d on /b (want 1), under a limit of 5 per minute each", servedA, servedB)
	}
}
