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
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func ExampleNew() {
	dir, err := os.MkdirTemp("", "porch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	clock := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), store.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer st.Close(context.Background())
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(context.Background())

	lim, err := rate.New(pool, st, 2, time.Minute, rate.Options{})
	if err != nil {
		panic(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Header().Get("RateLimit"))
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Print(" Retry-After: ", ra)
		}
		fmt.Println()
		clock.Advance(15 * time.Second)
	}
	// Output:
	// 200 "default";r=1;t=60
	// 200 "default";r=0;t=45
	// 429 "default";r=0;t=30 Retry-After: 30
}
