package inflight_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// Two limiters on one PostgreSQL database whose sessions are terminated
// (pg_terminate_backend) over and over while their requests acquire,
// renew and give back slots: never more than the limit hold a slot at
// once, failures are errors (503), never an unchecked pass, and once the
// sessions are left alone every slot is free within a lease.
func TestLostSessionsPostgres(t *testing.T) {
	const limit, lease = 2, 500 * time.Millisecond
	dsn := pgtest.DSN(t)
	app := "porch-inflight-kill-" + uuid.NewString()[:8]
	var lims []*inflight.Limiter
	for range 2 {
		st, err := postgres.Open(context.Background(), pgtest.WithParam(dsn, "application_name", app), postgres.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		l := inflight.New(newPool(t, porch.PoolOptions{}), st, limit, inflight.Options{Lease: lease})
		t.Cleanup(func() { l.Close(context.Background()) })
		lims = append(lims, l)
	}
	killer, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(context.Background())
	stop := make(chan struct{})
	var killed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // the pace of the kills
			}
			var n int64
			if err := killer.QueryRow(context.Background(),
				`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Error(err)
				return
			}
			killed.Add(n)
		}
	})
	var running, most, admitted, failed, limited atomic.Int64
	until := time.Now().Add(3 * time.Second)
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Go(func() {
			for time.Now().Before(until) {
				release, err := lims[g%2].Acquire(context.Background(), "alice")
				if errors.Is(err, inflight.ErrLimited) {
					limited.Add(1)
					continue
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				admitted.Add(1)
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond) // hold it a while
				running.Add(-1)
				release()
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d sessions terminated; %d admitted, %d limited, %d failed", killed.Load(), admitted.Load(), limited.Load(), failed.Load())
	if got := most.Load(); got > limit {
		t.Errorf("%d held at once, want at most %d", got, limit)
	}
	// Every slot comes back: given back, or its lease runs out.
	deadline := time.Now().Add(lease + 20*time.Second)
	for {
		var rels []func()
		for i := range limit {
			if rel, err := lims[i%2].Acquire(context.Background(), "alice"); err == nil {
				rels = append(rels, rel)
			}
		}
		for _, r := range rels {
			r()
		}
		if len(rels) == limit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d slots free %s after the kills stopped", len(rels), limit, lease+20*time.Second)
		}
		time.Sleep(20 * time.Millisecond) // polling the leases
	}
}
