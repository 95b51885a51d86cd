package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// Two slots of one principal are taken; a third is refused until one is
// given back.
func ExampleLimiter_Acquire() {
	ctx := context.Background()
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(ctx)
	st, _ := memory.Open()
	defer st.Close(ctx)
	lim := inflight.New(pool, st, 2, inflight.Options{Name: "exports"})
	defer lim.Close(ctx)

	first, _ := lim.Acquire(ctx, "alice")
	second, _ := lim.Acquire(ctx, "alice")
	_, err := lim.Acquire(ctx, "alice")
	fmt.Println(errors.Is(err, inflight.ErrLimited))
	first()
	third, err := lim.Acquire(ctx, "alice")
	fmt.Println(err)
	second()
	third()
	// Output:
	// true
	// <nil>
}

// A request of a principal whose every slot is in use (here held by a job
// through Acquire) is refused 429 with Retry-After and the RateLimit
// fields of the concurrent-requests quota; once the slot is back, the
// handler runs.
func ExampleLimiter_Handler() {
	ctx := context.Background()
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(ctx)
	st, _ := memory.Open()
	defer st.Close(ctx)
	lim := inflight.New(pool, st, 1, inflight.Options{
		Name:    "reports",
		KeyFunc: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	defer lim.Close(ctx)
	report := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "report")
	}))
	serve := func() {
		r := httptest.NewRequest(http.MethodGet, "/report", nil)
		r.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		report.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}

	job, _ := lim.Acquire(ctx, "alice")
	serve()
	job()
	serve()
	// Output:
	// 429 1 "reports";q=1;qu="concurrent-requests" "reports";r=0
	// 200  "reports";q=1;qu="concurrent-requests" "reports";r=0
}
