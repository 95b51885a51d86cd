package rate_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Count each user per route, and exempt health checks. The user id comes
// from a header an authentication middleware has verified; a request
// without one is counted by its client address.
func ExampleOptions_keyFunc() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	userRoute := porch.JoinKeys(porch.KeyByHeader("X-User-Id"), porch.KeyByRoute)
	lim, err := k.Limiter(1, time.Minute, rate.Options{
		KeyFunc: func(r *http.Request) (string, error) {
			if r.URL.Path == "/healthz" {
				return "", porch.ErrSkip
			}
			return userRoute(r)
		},
	})
	if err != nil {
		panic(err)
	}
	ok := func(w http.ResponseWriter, r *http.Request) {}
	r := chi.NewRouter()
	// With, not Use: chi knows the route pattern only once it has routed.
	r.With(lim.Handler).Get("/orders/{id}", ok)
	r.With(lim.Handler).Get("/cart", ok)
	r.With(lim.Handler).Get("/healthz", ok)

	for _, c := range []struct{ user, path string }{
		{"alice", "/orders/1"},
		{"alice", "/orders/2"}, // the same route: limited
		{"alice", "/cart"},     // another route
		{"bob", "/orders/1"},   // another user
		{"", "/healthz"},
		{"", "/healthz"}, // exempt: never limited
	} {
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		if c.user != "" {
			req.Header.Set("X-User-Id", c.user)
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(cmp.Or(c.user, "-"), c.path, rec.Code)
	}
	// Output:
	// alice /orders/1 200
	// alice /orders/2 429
	// alice /cart 200
	// bob /orders/1 200
	// - /healthz 200
	// - /healthz 200
}

// A request may cost more than one: here an export costs what its X-Items
// header says, within a limit of 100 items a minute.
func ExampleOptions_weight() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	lim, err := k.Limiter(100, time.Minute, rate.Options{
		Weight: func(r *http.Request) int {
			n, err := strconv.Atoi(r.Header.Get("X-Items"))
			if err != nil {
				return 1
			}
			return n
		},
	})
	if err != nil {
		panic(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, items := range []string{"60", "50", "40", "101"} {
		req := httptest.NewRequest(http.MethodGet, "/export", nil)
		req.RemoteAddr = "192.0.2.1:4711"
		req.Header.Set("X-Items", items)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(items, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 60 200 40
	// 50 429 40
	// 40 200 0
	// 101 413
}

// Outside a handler, count a job of weight n against a principal.
func ExampleLimiter_AllowN() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	lim, err := k.Limiter(10, time.Minute, rate.Options{})
	if err != nil {
		panic(err)
	}
	for _, n := range []int{4, 4, 3, 2} {
		v, err := lim.AllowN(context.Background(), "tenant-7", n)
		if err != nil {
			panic(err)
		}
		fmt.Println(n, v.Allowed, v.Remaining)
	}
	// Output:
	// 4 true 6
	// 4 true 2
	// 3 false 2
	// 2 true 0
}

// Roll a new limit out in dry run: every request is served, and the headers
// say what enforcing would have answered.
func ExampleOptions_dryRun() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	lim, err := k.Limiter(1, time.Minute, rate.Options{DryRun: true})
	if err != nil {
		panic(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Dry-Run"))
	}
	// Output:
	// 200 allowed
	// 200 limited
}
