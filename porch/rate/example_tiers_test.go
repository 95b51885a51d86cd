package rate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A free and a paid plan on one route: each a limiter of its own Name and
// policy, picked per request from the caller's plan.
func ExampleTiers() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order

	byKey := porch.KeyByHeader("X-Api-Key")
	free, err := k.Limiter(1, time.Minute, rate.Options{Name: "free", KeyFunc: byKey})
	if err != nil {
		panic(err)
	}
	paid, err := k.Limiter(100, time.Minute, rate.Options{Name: "paid", KeyFunc: byKey})
	if err != nil {
		panic(err)
	}
	plans := map[string]string{"k-ann": "free", "k-bob": "paid"} // your accounts
	tiered := rate.Tiers(func(r *http.Request) (string, error) {
		return plans[r.Header.Get("X-Api-Key")], nil // an unknown key's "" is no tier: 500
	}, map[string]rate.Tier{"free": free, "paid": paid})
	h := tiered.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, key := range []string{"k-ann", "k-ann", "k-bob", "k-bob", "k-eve"} {
		req := httptest.NewRequest(http.MethodGet, "/search", nil)
		req.Header.Set("X-Api-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(key, rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// k-ann 200 "free";q=1;w=60
	// k-ann 429 "free";q=1;w=60
	// k-bob 200 "paid";q=100;w=60
	// k-bob 200 "paid";q=100;w=60
	// k-eve 500
}
