package rate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Each part by hand: a store, a pool, a limiter, closed in the reverse
// order (the limiter writes its exact counts through the pool, whose last
// jobs write to the store). The other examples get the same from kit.Open,
// whose Close keeps that order.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "porch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	clock := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Clock: clock}})
	if err != nil {
		panic(err)
	}
	defer st.Close(context.Background())
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(context.Background()) // before the store: its last jobs may write

	lim, err := rate.New(pool, st, 2, time.Minute, rate.Options{})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background()) // first: it writes its exact counts through the pool
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

// A route with a burst limit and an hourly one. Every answer comes from one
// policy: the one with the least left, or the one that refused, and
// RateLimit-Policy announces both.
func ExampleAll() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	clock := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Clock: clock}})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order

	burst, err := k.Limiter(2, time.Minute, rate.Options{Name: "burst"})
	if err != nil {
		panic(err)
	}
	hourly, err := k.Limiter(3, time.Hour, rate.Options{Name: "hourly"})
	if err != nil {
		panic(err)
	}
	h := rate.All(burst, hourly).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	send := func() {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Header().Get("RateLimit"))
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Print(" Retry-After: ", ra)
		}
		fmt.Println()
	}
	send()
	send()
	send() // the burst is spent
	clock.Advance(time.Minute)
	send()
	send() // the hour is spent: the burst's hit is given back
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 "burst";r=1;t=60
	// 200 "burst";r=0;t=60
	// 429 "burst";r=0;t=60 Retry-After: 60
	// 200 "hourly";r=0;t=3540
	// 429 "hourly";r=0;t=3540 Retry-After: 3540
	// "burst";q=2;w=60, "hourly";q=3;w=3600
}

// A shop that answers a refusal with a page of its own, a failure on its
// pages with a short text, and a failure on its API with the default
// problem under its own URI.
func ExampleOptions() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order

	lim, err := k.Limiter(1, time.Minute, rate.Options{
		LimitResponse: func(r *http.Request, v rate.Verdict) *porch.Response {
			return &porch.Response{ // Status zero: 429
				Header: http.Header{"Content-Type": {"text/html"}},
				Body:   []byte("<p>One order a minute, please.</p>"),
			}
		},
		ErrorResponse: func(r *http.Request, err error) *porch.Response {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				return nil // the default problem
			}
			return &porch.Response{Body: []byte("Busy, try again.")} // Status zero: 503
		},
		ProblemBase: "https://shop.example/problems/",
	})
	if err != nil {
		panic(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ordered")
	}))
	send := func(path string) {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.RemoteAddr = "192.0.2.1:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var p porch.Problem
		if json.Unmarshal(rec.Body.Bytes(), &p) == nil {
			rec.Body.Reset()
			rec.Body.WriteString(p.Type)
		}
		fmt.Printf("%d Retry-After=%q %s\n", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	send("/orders")
	send("/orders")
	k.Pool().Close(context.Background()) // every count from now on fails
	send("/orders")
	send("/api/orders")
	// Output:
	// 200 Retry-After="" ordered
	// 429 Retry-After="60" <p>One order a minute, please.</p>
	// 503 Retry-After="1" Busy, try again.
	// 503 Retry-After="1" https://shop.example/problems/rate-unavailable
}
