package rate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

func r16PGInstance(t *testing.T, dsn string, limit int, window time.Duration, o rate.Options) *instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	in := &instance{pool: porch.NewPool(porch.PoolOptions{}), st: st}
	t.Cleanup(func() { in.stop(t) })
	in.lim, err = rate.New(in.pool, st, limit, window, o)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// A fixed window that is not whole milliseconds is counted on PostgreSQL
// under its milliseconds rounded down (window_ms): 1 per 1.999ms serves
// about one per millisecond.
func TestPostgresFixedWindowNotWholeMS(t *testing.T) {
	dsn := pgtest.DSN(t)
	in := r16PGInstance(t, dsn, 1, 1999*time.Microsecond, rate.Options{})
	const key = "rate:default:ip:192.0.2.90"
	start := time.Now()
	allowed := 0
	for time.Since(start) < 200*time.Millisecond {
		v, err := in.lim.AllowKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			allowed++
		}
	}
	el := time.Since(start)
	most := int(el/(1999*time.Microsecond)) + 2 // +1 for the first, +1 for the database's rounded clock
	t.Logf("allowed %d in %s (most %d)", allowed, el, most)
	if allowed > most {
		t.Errorf("fixed 1 per 1.999ms on PostgreSQL: %d allowed in %s, want at most %d", allowed, el, most)
	}
	// The row's own window: what the database counts under.
	var span int64
	span = r16RowSpan(t, dsn)
	if span < 2 {
		t.Errorf("fixed 1 per 1.999ms on PostgreSQL: the stored window spans %dms (expires_at - window_start), want at least 2 (1.999 rounded up)", span)
	}
}

func r16RowSpan(t *testing.T, dsn string) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var span int64
	if err := conn.QueryRow(context.Background(), `SELECT expires_at - window_start FROM porch_rate_counters LIMIT 1`).Scan(&span); err != nil {
		t.Fatal(err)
	}
	return span
}

// Two instances, GCRA and sliding, weights 1..3 in parallel for a long
// window: exactly Limit (sliding) / Burst (GCRA) of weight are served, and
// Peek agrees with Allow afterwards.
func TestPostgresTwoInstancesExact(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		alg   rate.Algorithm
		limit int
		burst int
		want  int64
	}{
		{rate.SlidingWindow, 97, 0, 97},
		{rate.GCRA, 1000, 61, 61},
	} {
		o := rate.Options{Algorithm: tc.alg, Burst: tc.burst, Name: "r16" + tc.alg.String()}
		a := r16PGInstance(t, dsn, tc.limit, time.Hour, o)
		b := r16PGInstance(t, dsn, tc.limit, time.Hour, o)
		key := "client-91"
		var served atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			in := a
			if g%2 == 1 {
				in = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					n := 1 + (g+i)%3
					v, err := in.lim.AllowN(context.Background(), key, n)
					if err != nil {
						t.Error(err)
						return
					}
					if v.Allowed {
						served.Add(int64(n))
					}
				}
			}()
		}
		wg.Wait()
		// GCRA at 1000/h: about 0.0x emissions regained in the test's seconds
		if got := served.Load(); got > tc.want || got < tc.want-2 {
			t.Errorf("%s two instances: served weight %d, want %d (-2)", tc.alg, got, tc.want)
		}
		p, err := a.lim.Peek(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		v, err := b.lim.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if p.Allowed != v.Allowed || p.Remaining < v.Remaining {
			t.Errorf("%s: Peek %+v vs Allow %+v", tc.alg, p, v)
		}
	}
}
