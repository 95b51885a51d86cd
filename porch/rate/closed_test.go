package rate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// A closed limiter counts nothing more: Close frees its Name, so a limiter
// that went on counting would count beside the one that takes the Name
// next, each in its own memory, and a client would get the limit twice.
func TestClosedLimiterRefusesToCount(t *testing.T) {
	ctx := context.Background()
	st, err := memory.Open()
	if err != nil {
		t.Fatal(err)
	}
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() {
		pool.Close(ctx)
		st.Close(ctx)
	})
	old, err := rate.New(pool, st, 5, time.Hour, rate.Options{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := rate.New(pool, st, 5, time.Hour, rate.Options{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close(ctx) })
	allowed := 0
	for range 10 {
		for _, l := range []*rate.Limiter{old, next} {
			v, err := l.Allow(ctx, "alice")
			if err == nil && v.Allowed {
				allowed++
			}
			if l == old && !errors.Is(err, porch.ErrClosed) {
				t.Errorf("Allow on a closed limiter: %+v, %v; want porch.ErrClosed", v, err)
			}
		}
	}
	if allowed > 5 {
		t.Errorf("a closed limiter and the one that took its Name allowed %d of 20 requests for one key, want at most the limit, 5", allowed)
	}
}
