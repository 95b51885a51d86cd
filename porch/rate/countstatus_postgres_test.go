package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// openShared opens one instance's store, pool and limiter on dsn, closed
// at cleanup in the order App closes them.
func openShared(t testing.TB, dsn string, limit int, window time.Duration, opt rate.Options) (*postgres.Store, *rate.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	return st, limiterOn(t, st, limit, window, opt)
}

// limiterOn builds a limiter on st with a pool of its own; at cleanup the
// pool closes, then st.
func limiterOn(t testing.TB, st driver.Counters, limit int, window time.Duration, opt rate.Options) *rate.Limiter {
	t.Helper()
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() {
		pool.Close(context.Background())
		st.Close(context.Background())
	})
	lim, err := rate.New(pool, st, limit, window, opt)
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return lim
}

// On PostgreSQL as on SQLite, only failed logins count, given-back hits
// are gone from the committed count Peek reads, and parallel attempts run
// no more handlers than the limit.
func TestCountStatusPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			_, lim := openShared(t, dsn, 3, time.Hour, rate.Options{Name: "login", KeyFunc: byUser, CountStatus: rate.Failures})
			checkOnlyFailuresCount(t, lim, w.wrap, "ann-"+w.name)
		})
	}
	_, lim := openShared(t, dsn, 5, time.Hour, rate.Options{Name: "parallel", KeyFunc: byUser, CountStatus: rate.Failures})
	ctx := context.Background()
	checkCountedBeforeHandler(t, lim, wirings[1].wrap, "ok", 200)
	if v, err := lim.Peek(ctx, "ok"); err != nil || v.Remaining != 5 {
		t.Fatalf("after 5 successful attempts: got %+v, %v; want all 5 given back", v, err)
	}
	checkCountedBeforeHandler(t, lim, wirings[0].wrap, "bad", 401)
	if v, err := lim.Peek(ctx, "bad"); err != nil || v.Remaining != 0 {
		t.Fatalf("after 5 failed attempts: got %+v, %v; want 0 remaining", v, err)
	}
}
