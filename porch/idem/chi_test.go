package idem_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
)

// TestChiMiddleware uses m.Handler as plain chi middleware, both on one
// route and for a whole router, with the handler reading chi's URL
// parameters through the context the middleware passes on.
func TestChiMiddleware(t *testing.T) {
	st := openStore(t, store.Options{})
	pool := newPool(t, porch.PoolOptions{})
	m := idem.New(pool, st, idem.Options{RequireKey: true})

	var calls atomic.Int64
	pay := func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "paid order %s (call %d)", chi.URLParam(r, "id"), n)
	}
	r := chi.NewRouter()
	r.With(m.Handler).Post("/orders/{id}/pay", pay)
	r.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "order ", chi.URLParam(r, "id")) })
	r.Route("/admin", func(r chi.Router) {
		r.Use(m.Handler)
		r.Post("/refunds/{id}", pay)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	e := &env{pool: pool, store: st, m: m, handler: r, srv: srv}

	first := e.do(t, http.MethodPost, "/orders/7/pay", "card", "k1")
	if first.status != http.StatusCreated || string(first.body) != "paid order 7 (call 1)" {
		t.Fatalf("first: got %s, want 201 paid order 7 (call 1)", first)
	}
	tests := []struct {
		name, method, path, key string
		wantStatus              int
		wantBody                string // prefix
		wantReplay              bool
	}{
		{"replay", http.MethodPost, "/orders/7/pay", "k1", http.StatusCreated, "paid order 7 (call 1)", true},
		{"same key, other order", http.MethodPost, "/orders/8/pay", "k1", http.StatusUnprocessableEntity, "{", false},
		{"no key", http.MethodPost, "/orders/8/pay", "", http.StatusBadRequest, "{", false},
		{"unkeyed route", http.MethodGet, "/orders/7", "", http.StatusOK, "order 7", false},
		{"router-level Use", http.MethodPost, "/admin/refunds/9", "k2", http.StatusCreated, "paid order 9 (call 2)", false},
		{"router-level Use, replay", http.MethodPost, "/admin/refunds/9", "k2", http.StatusCreated, "paid order 9 (call 2)", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			if tc.key != "" {
				keys = []string{tc.key}
			}
			got := e.do(t, tc.method, tc.path, "card", keys...)
			if got.status != tc.wantStatus || !bytes.HasPrefix(got.body, []byte(tc.wantBody)) {
				t.Errorf("got %s, want %d %s…", got, tc.wantStatus, tc.wantBody)
			}
			if got.replayed() != tc.wantReplay {
				t.Errorf("replayed: got %v, want %v", got.replayed(), tc.wantReplay)
			}
		})
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("handler calls: got %d, want 2", got)
	}
}

// TestChainWithLimiter puts the middleware in a porch chain with a limiter
// that refuses the first request. Behind the limiter (as the storefront has
// it) the refusal never reserves the key; in front of it the refusal reaches
// its After, and since the handler never ran it must not be stored and
// replayed for the key's whole TTL. Either way the next request runs fresh.
func TestChainWithLimiter(t *testing.T) {
	tests := []struct {
		name  string
		chain func(m *idem.Keys, r refuser) func(http.Handler) http.Handler
	}{
		{"idempotency after the limiter", func(m *idem.Keys, r refuser) func(http.Handler) http.Handler {
			return porch.Chain(r, m)
		}},
		{"idempotency before the limiter", func(m *idem.Keys, r refuser) func(http.Handler) http.Handler {
			return porch.Chain(m, r)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, store.Options{})
			pool := newPool(t, porch.PoolOptions{})
			m := idem.New(pool, st, idem.Options{})
			var refuse atomic.Bool
			refuse.Store(true)
			o := new(orders)
			h := tc.chain(m, refuser{&refuse})(o)

			refused := httptest.NewRecorder()
			h.ServeHTTP(refused, keyed("one", "k"))
			if refused.Code != http.StatusTooManyRequests {
				t.Fatalf("refused: got %d, want 429", refused.Code)
			}
			refuse.Store(false)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, keyed("one", "k"))
			if rec.Code != http.StatusCreated || rec.Header().Get(idem.ReplayedHeader) != "" {
				t.Errorf("after the refusal: got %d %s, want a fresh 201, not a stored refusal", rec.Code, strings.TrimSpace(rec.Body.String()))
			}
			if got := o.calls.Load(); got != 1 {
				t.Errorf("handler calls: got %d, want 1", got)
			}
		})
	}
}

// refuser is a stand-in for a rate limiter: while refuse is set, its Before
// answers 429.
type refuser struct{ refuse *atomic.Bool }

func (f refuser) Before(r *http.Request) (*http.Request, *porch.Response) {
	if f.refuse.Load() {
		return r, &porch.Response{Status: http.StatusTooManyRequests}
	}
	return r, nil
}

func (refuser) After(*http.Request, *porch.Response, porch.Completion) {}
