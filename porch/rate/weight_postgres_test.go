package rate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// On PostgreSQL, as on SQLite, a request of weight n is counted only if the
// count plus n is within the limit, and a refused one changes nothing: a
// lighter request after a refused heavy one is still allowed.
func TestWeightPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	in := newInstance(t, dsn, 10, time.Hour)
	steps := []struct {
		n             int
		wantAllowed   bool
		wantRemaining int64
	}{
		{4, true, 6},
		{4, true, 2},
		{3, false, 2}, // 11 > 10: refused, not counted
		{2, true, 0},
		{1, false, 0},
	}
	for i, s := range steps {
		v, err := in.lim.AllowN(context.Background(), "alice", s.n)
		if err != nil {
			t.Fatalf("AllowN %d (%d): %v", i+1, s.n, err)
		}
		if v.Allowed != s.wantAllowed || v.Remaining != s.wantRemaining {
			t.Errorf("AllowN %d (%d): got allowed %v remaining %d, want %v %d", i+1, s.n, v.Allowed, v.Remaining, s.wantAllowed, s.wantRemaining)
		}
	}
}

// Two instances counting weighted hits concurrently, batched together,
// allow exactly the requests whose running total stays within the limit.
func TestWeightPostgresExactAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, weight, perInstance = 100, 3, 60
	a := newInstance(t, dsn, limit, time.Hour)
	b := newInstance(t, dsn, limit, time.Hour)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, in := range []*instance{a, b} {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				v, err := in.lim.AllowN(context.Background(), "bulk", weight)
				if err != nil {
					t.Errorf("AllowN: %v", err)
					return
				}
				if v.Allowed {
					allowed.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if got, want := allowed.Load(), int64(limit/weight); got != want {
		t.Errorf("got %d requests of weight %d allowed under limit %d, want %d", got, weight, limit, want)
	}
	// The refused hits were taken back out: the row holds what was allowed.
	var stored int64
	err := a.st.Pool().QueryRow(context.Background(), `SELECT count FROM porch_rate_counters WHERE key = 'rate:default:p:bulk'`).Scan(&stored)
	if err != nil {
		t.Fatalf("read counter: %v", err)
	}
	if want := int64(limit / weight * weight); stored != want {
		t.Errorf("got stored count %d, want %d", stored, want)
	}
}
