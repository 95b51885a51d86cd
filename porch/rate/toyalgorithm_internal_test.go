package rate

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// toy is an algorithm that exists only in this file: limit per window, in
// windows aligned to multiples of the window since the zero time (every
// key's window closes at once, as a calendar's would). It proves that an
// algorithm is one value: registered here, it counts through rate.New,
// the drivers' suite and a restart without a line of rate changed.
type toy struct{}

func (toy) Name() string { return "toy" }
func (toy) Leases() bool { return false }

func (toy) Rule(limit int64, window time.Duration, burst int64) (algorithm.Rule, error) {
	if burst != 0 {
		return nil, errors.New("toy has no burst")
	}
	return toyRule{limit: limit, window: window}, nil
}

type toyRule struct {
	limit  int64
	window time.Duration
}

func (toyRule) Algorithm() string                  { return "toy" }
func (r toyRule) Limit() int64                     { return r.limit }
func (r toyRule) Window() time.Duration            { return r.window }
func (toyRule) Interval() time.Duration            { return 0 }
func (r toyRule) Most() int64                      { return r.limit }
func (toyRule) Burst() int64                       { return 0 }
func (r toyRule) Life() time.Duration              { return r.window }
func (r toyRule) Expires(s driver.State) time.Time { return s.Start.Add(r.window) }

func (r toyRule) Advance(s driver.State, now time.Time) driver.State {
	if start := now.Truncate(r.window); !start.Equal(s.Start) {
		return driver.State{Start: start}
	}
	return s
}

func (r toyRule) Room(s driver.State, _ time.Time) int64 { return r.limit - s.Count }

func (r toyRule) ResetIn(s driver.State, now time.Time) time.Duration {
	return max(r.Expires(s).Sub(now), 0)
}

func (r toyRule) RetryIn(s driver.State, now time.Time, _ int64) time.Duration {
	return r.ResetIn(s, now)
}

func (r toyRule) Row(key string, s driver.State, count int64) driver.Counter {
	return driver.Counter{Key: key, State: driver.State{Start: s.Start, Count: count}, Window: r.window, Expires: r.Expires(s)}
}

func (toyRule) Resume(c driver.Counter, _ time.Time) driver.State { return c.State }

func (toyRule) Carried(time.Time, int64, time.Time) (int64, bool) { return 0, false }

func (toyRule) LeaseCutoff(time.Duration) time.Duration { return time.Millisecond }

// registerToy adds toy to the algorithms' table for t, and returns the
// Options.Algorithm that selects it.
func registerToy(t *testing.T) Algorithm {
	t.Helper()
	i, unregister, err := algorithm.Register(toy{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unregister)
	return Algorithm(i)
}

// The drivers' suite runs the toy over each store that can count it
// without statements of its own: an exclusive one decides in the
// limiter's memory. A shared driver has no statements for it, and the
// suite skips it there (driver.ErrAlgorithm).
func TestToyAlgorithmCountersSuite(t *testing.T) {
	registerToy(t)
	for _, s := range []struct {
		name string
		h    storetest.Harness
	}{
		{"SQLite", storetest.Harness{
			DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
			Open: func(t *testing.T, db string) driver.Counters {
				st, err := sqlite.Open(db, sqlite.Options{})
				if err != nil {
					t.Fatalf("sqlite.Open: %v", err)
				}
				return st
			},
		}},
		{"memory", storetest.Harness{
			DB: func(t *testing.T) string { return t.Name() },
			Open: func(t *testing.T, _ string) driver.Counters {
				st, err := memory.Open()
				if err != nil {
					t.Fatalf("memory.Open: %v", err)
				}
				return st
			},
			Forgets: true,
		}},
		{"PostgreSQL", storetest.Harness{
			DB: func(t *testing.T) string { return pgtest.DSN(t) },
			Open: func(t *testing.T, dsn string) driver.Counters {
				st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
				if err != nil {
					t.Fatalf("postgres.Open: %v", err)
				}
				return st
			},
		}},
		{"Redis", storetest.Harness{
			DB: func(t *testing.T) string { return redistest.Prefix(t, redistest.Client(t)) },
			Open: func(t *testing.T, prefix string) driver.Counters {
				st, err := redis.Open(context.Background(), redistest.Client(t), redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
				if err != nil {
					t.Fatalf("redis.Open: %v", err)
				}
				return st
			},
		}},
	} {
		t.Run(s.name, func(t *testing.T) {
			h := s.h
			h.Algorithms = []string{toy{}.Name()}
			storetest.TestCounters(t, h)
		})
	}
}

// A limiter of the toy algorithm, on SQLite: named and parsed like the
// others, counting its limit per aligned window, telling the client when
// the window closes, and resuming its counts after a restart.
func TestToyAlgorithmLimiter(t *testing.T) {
	alg := registerToy(t)
	if alg.String() != "toy" {
		t.Errorf("String() = %q, want toy", alg.String())
	}
	if got, err := ParseAlgorithm("toy"); err != nil || got != alg {
		t.Errorf(`ParseAlgorithm("toy") = %v, %v; want %v`, got, err, alg)
	}
	const limit, window = 3, time.Hour
	clock := &stepClock{wall: t0.Add(10 * time.Minute)} // t0 is on the hour: 50 minutes left
	db := filepath.Join(t.TempDir(), "porch.db")
	open := func() (*Limiter, func()) {
		st, err := sqlite.Open(db, sqlite.Options{Options: store.Options{Clock: clock}})
		if err != nil {
			t.Fatal(err)
		}
		pool := porch.NewPool(porch.PoolOptions{})
		l, err := New(pool, st, limit, window, Options{Algorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		return l, func() {
			ctx := context.Background()
			l.Close(ctx)
			pool.Close(ctx)
			st.Close(ctx)
		}
	}
	ctx := context.Background()
	l, stop := open()
	for i := range 2 {
		if v, err := l.Allow(ctx, "p"); err != nil || !v.Allowed {
			t.Fatalf("hit %d: %+v, %v; want allowed", i+1, v, err)
		}
	}
	stop()
	l, stop = open()
	defer stop()
	if v, err := l.Allow(ctx, "p"); err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("third hit after a restart: %+v, %v; want allowed with 0 remaining (2 counted before it)", v, err)
	}
	v, err := l.Allow(ctx, "p")
	if err != nil || v.Allowed {
		t.Fatalf("fourth hit: %+v, %v; want refused", v, err)
	}
	if want := t0.Add(window); !v.RetryAt.Equal(want) {
		t.Errorf("RetryAt %v, want the aligned window's close %v", v.RetryAt, want)
	}
	clock.Advance(50 * time.Minute)
	if v, err := l.Allow(ctx, "p"); err != nil || !v.Allowed {
		t.Errorf("in the next aligned window: %+v, %v; want allowed", v, err)
	}
}
