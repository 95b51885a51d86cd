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

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A second kit on the file a kit holds fails to open; after Close every
// middleware the kit handed out answers with a 5xx rather than serving or
// panicking; and Limit on the closed kit panics with porch.ErrClosed.
func TestKitProbes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	k := kit.Must(kit.Open(sqlite.Open(path, sqlite.Options{})))
	if _, err := kit.Open(sqlite.Open(path, sqlite.Options{})); err == nil {
		t.Errorf("a second kit on the same file opened")
	} else {
		t.Logf("second opener: %v", err)
	}
	lim, err := k.Limiter(5, time.Minute, rate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := k.Idempotency(idem.Options{})
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
	// Limit panics rather than return an error; on a closed kit the panic
	// must say why, with porch.ErrClosed's text.
	func() {
		defer func() {
			p := recover()
			if p == nil || !strings.Contains(fmt.Sprint(p), porch.ErrClosed.Error()) {
				t.Errorf("Limit on a closed kit: got panic %v, want one naming %q", p, porch.ErrClosed)
			}
		}()
		k.Limit(5, time.Minute)
	}()
	if p := panicOf(func() { k.Idempotency(idem.Options{}) }); !errors.Is(p, porch.ErrClosed) {
		t.Errorf("Idempotency on a closed kit: got panic %v, want porch.ErrClosed", p)
	}
}

// The first Limit's policy is "default", the name a limiter without
// Options.Name has and the one a reader guesses; later ones are numbered
// so that each route keeps a limit of its own. After a Limiter of that
// name, the first Limit is "limit1" instead (TestKitProbes).
func TestLimitNames(t *testing.T) {
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})))
	defer k.Close(context.Background())
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, want := range []string{`"default";q=5;w=60`, `"limit2";q=5;w=60`, `"limit3";q=5;w=60`} {
		rec := httptest.NewRecorder()
		k.Limit(5, time.Minute)(ok).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if got := rec.Header().Get("RateLimit-Policy"); got != want {
			t.Errorf("RateLimit-Policy: got %q, want %q", got, want)
		}
	}
}

// Two routes each mounting k.Limit(5, time.Minute) get a limit each, and
// keep it across a restart: one client is served 5 of 5 on /a and 1 on /b
// (the two count apart), and after the kit is reopened on the same file
// the first Limit made resumes /a's count, so /a serves nothing more
// within the minute.
func TestTwoLimitsCountApartAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	k := kit.Must(kit.Open(sqlite.Open(path, sqlite.Options{})))
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
	k2 := kit.Must(kit.Open(sqlite.Open(path, sqlite.Options{})))
	defer k2.Close(context.Background())
	a2 := k2.Limit(5, time.Minute)(ok)
	for range 5 {
		if hit(a2) == 200 {
			servedA++
		}
	}
	// Limits are named in the order they are made, so the reopened kit's
	// first Limit is /a's "default" again, with its 5 hits.
	if servedA != 5 || servedB != 1 {
		t.Errorf("served %d on /a (want 5, across a restart) and %d on /b (want 1), under a limit of 5 per minute each", servedA, servedB)
	}
}

// After k.Limit has taken "default", a Limiter of that name, or of none
// (whose name is "default"), is refused on every store, under the same
// policy as well as another, with a message that names the clash and its
// cure: on SQLite it was refused with "another policy" when the policies
// were the same, and on a shared store the two would have counted one
// client's requests to both routes together. A Limiter with a Name of its
// own is made as before.
func TestLimiterAfterLimitNamesTheClash(t *testing.T) {
	stores := map[string]func(t *testing.T) *kit.Kit{
		"sqlite": func(t *testing.T) *kit.Kit {
			return kit.Must(kit.Open(sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})))
		},
		"memory": func(*testing.T) *kit.Kit { return kit.Must(kit.Open(memory.Open())) },
		"postgres": func(t *testing.T) *kit.Kit {
			return kit.Must(kit.Open(postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{})))
		},
	}
	tests := []struct {
		name  string
		limit int
		opt   rate.Options
	}{
		{"no name, the same policy", 5, rate.Options{}},
		{"no name, another policy", 6, rate.Options{}},
		{`named "default"`, 5, rate.Options{Name: "default"}},
	}
	for storeName, open := range stores {
		for _, tt := range tests {
			t.Run(storeName+"/"+tt.name, func(t *testing.T) {
				k := open(t)
				defer k.Close(context.Background())
				k.Limit(5, time.Minute)
				_, err := k.Limiter(tt.limit, time.Minute, tt.opt)
				if !errors.Is(err, store.ErrPolicyConflict) {
					t.Fatalf("Limiter after Limit: %v, want store.ErrPolicyConflict", err)
				}
				if msg := err.Error(); !strings.Contains(msg, "k.Limit") || !strings.Contains(msg, "rate.Options.Name") {
					t.Errorf("Limiter after Limit: %q, want it to name k.Limit and rate.Options.Name", msg)
				}
				if _, err := k.Limiter(tt.limit, time.Minute, rate.Options{Name: "api"}); err != nil {
					t.Errorf("a Limiter with a Name of its own: %v", err)
				}
			})
		}
	}
}
