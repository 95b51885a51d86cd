package rate_test

// Options.Lease under store faults mid-lease: each must fail closed and
// leave the count on the safe side.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"

	goredis "github.com/redis/go-redis/v9"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// failClosed checks a hit's outcome: an error with a zero verdict, or a verdict.
func failClosed(t *testing.T, name string, o outcome) {
	t.Helper()
	if o.err != nil && o.v != (rate.Verdict{}) {
		t.Errorf("%s: a verdict %+v beside the error %v", name, o.v, o.err)
	}
	t.Logf("%s: allowed=%v err=%v", name, o.v.Allowed, o.err)
}

func within(t *testing.T, name string, ch chan outcome, d time.Duration) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(d):
		t.Fatalf("%s: no answer within %s", name, d)
	}
	return outcome{}
}

// allowAgain waits for the store to answer a hit of who again after a
// fault, and fails unless it is allowed. The store reconnects on a later
// try; how soon is the machine's business, so the wait is generous (it
// was half a second, and 2s after a Redis restart, which a loaded machine
// can outlast).
func allowAgain(t *testing.T, lim *rate.Limiter, who, after string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := lim.Allow(context.Background(), who)
		if err == nil && v.Allowed {
			return
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("%s: %+v, %v; want allowed", after, v, err)
		}
		time.Sleep(100 * time.Millisecond) // the store reconnects on a later try
	}
}

// The committer's backend is terminated while a lease trip waits on a lock,
// with a hit waiting for that trip: both are answered (error or verdict,
// never both), and the key is decided again afterwards.
func TestLeaseTripBackendTerminatedFailsClosed(t *testing.T) {
	dsn := pgtest.DSN(t)
	_, _, lim := leasePG(t, dsn, porch.PoolOptions{}, 1000, time.Hour, rate.Options{Name: "terminated", Lease: 8})
	for range 3 {
		mustAllow(t, lim, "ann")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE porch_rate_counters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	a := goAllow(lim, ctx, "ann")
	time.Sleep(50 * time.Millisecond)
	b := goAllow(lim, ctx, "ann")
	time.Sleep(100 * time.Millisecond)
	var n int
	// Only the backends blocked by this test's own lock.
	if err := tx.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("terminated %d backends", n)
	tx.Rollback(ctx)
	failClosed(t, "trip", within(t, "trip", a, 10*time.Second))
	failClosed(t, "waiter", within(t, "waiter", b, 10*time.Second))
	allowAgain(t, lim, "ann", "after the fault")
	closeLimiter(t, lim)
}

// Redis paused with a lease trip in flight and a hit waiting for it, then
// killed: both are answered (no hang), fail closed; after a restart the key
// is decided again.
func TestLeaseTripRedisKilledFailsClosed(t *testing.T) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	st, err := redis.Open(ctx, c, redis.Options{Prefix: "leasefaults:", Options: store.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	lim := limiterOn(t, st, 1000, time.Hour, rate.Options{Name: "killed", Lease: 8, Algorithm: rate.SlidingWindow})
	for range 3 {
		mustAllow(t, lim, "ann")
	}
	srv.Pause()
	a := goAllow(lim, ctx, "ann")
	time.Sleep(50 * time.Millisecond)
	b := goAllow(lim, ctx, "ann")
	time.Sleep(50 * time.Millisecond)
	srv.Resume()
	srv.Kill9()
	failClosed(t, "trip", within(t, "trip", a, 15*time.Second))
	failClosed(t, "waiter", within(t, "waiter", b, 15*time.Second))
	srv.Restart()
	allowAgain(t, lim, "ann", "after the restart")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := lim.Close(cctx); err != nil {
		t.Logf("close: %v", err)
	}
}

// Two leased instances, weighted hits on a few keys, short fixed windows,
// peeks alongside, under -race: no window serves past its limit, nothing
// hangs. This held.
func TestLeaseWeightedShortWindowsNeverOverLimit(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, window = 50, 300 * time.Millisecond
	opt := rate.Options{Name: "stress", Lease: 16}
	var lims []*rate.Limiter
	for range 2 {
		_, _, lim := leasePG(t, dsn, porch.PoolOptions{Size: 4, Mailbox: 64}, limit, window, opt)
		lims = append(lims, lim)
	}
	type win struct {
		key string
		end int64
	}
	var mu sync.Mutex
	served := map[win]int64{}
	keys := []string{"a", "b", "c"}
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i, lim := range lims {
		for g := range 6 {
			wg.Go(func() {
				for j := 0; time.Now().Before(stop); j++ {
					key, n := keys[(g+j)%len(keys)], 1+(i+g+j)%3
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					v, err := lim.AllowN(ctx, key, n)
					cancel()
					if err != nil {
						if errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("AllowN hung: %v", err)
							return
						}
						continue // saturated: fail closed
					}
					if v.Allowed {
						mu.Lock()
						served[win{key, v.ResetAt.UnixMilli()}] += int64(n)
						mu.Unlock()
					}
					if j%10 == 0 {
						lim.Peek(context.Background(), key)
					}
				}
			})
		}
	}
	wg.Wait()
	// A fixed window's verdicts share its end, read on two clocks: ends
	// within 50 ms of each other are one window (windows are 300 ms apart).
	merged := map[win]int64{}
	for w, n := range served {
		w.end = (w.end + 50) / 100 // windows end ~300 ms apart; jitter is a few ms
		merged[w] += n
	}
	for w, n := range merged {
		if n > limit {
			t.Errorf("key %s, window ending ~%d00 ms: served %d, over the limit of %d", w.key, w.end, n, limit)
		}
	}
	t.Logf("%d windows", len(merged))
	for _, lim := range lims {
		closeLimiter(t, lim)
	}
}

// A leased limiter's sweeper ends with its pool when Close is skipped: it
// ticks every LeaseIdle, and its give-backs fail with ErrClosed once the
// pool is gone, so it must exit then rather than pin the limiter forever.
func TestLeaseSweeperEndsWithItsPool(t *testing.T) {
	const frame = "porch/rate/internal/count.(*leases).sweeper("
	before := testkit.CountStacks(frame)
	dsn := pgtest.DSN(t)
	_, pool, lim := leasePG(t, dsn, porch.PoolOptions{}, 10, time.Minute, rate.Options{Name: "leak", Lease: 4})
	mustAllow(t, lim, "ann")
	if n := testkit.CountStacks(frame) - before; n != 1 {
		t.Fatalf("%d lease sweeper goroutines run for one leased limiter, want 1: the test cannot see it", n)
	}
	pool.Close(context.Background())
	// It exits at its next tick after the pool closed; wait for that,
	// with room for a loaded machine.
	deadline := time.Now().Add(20*rate.LeaseIdle + 10*time.Second)
	for testkit.CountStacks(frame) > before {
		if time.Now().After(deadline) {
			t.Fatalf("the lease sweeper still runs %v after its pool closed", 20*rate.LeaseIdle+10*time.Second)
		}
		time.Sleep(time.Millisecond)
	}
	closeLimiter(t, lim)
}

// rate.All of two leased limiters: the tighter one refuses, the looser
// one's hits are given back into its lease; after Close both hold exactly
// the requests served. This held.
func TestLeasedSetExactAfterClose(t *testing.T) {
	dsn := pgtest.DSN(t)
	_, _, loose := leasePG(t, dsn, porch.PoolOptions{}, 1000, time.Hour, rate.Options{Name: "loose", Lease: 16, KeyFunc: byUser})
	_, _, tight := leasePG(t, dsn, porch.PoolOptions{}, 30, time.Hour, rate.Options{Name: "tight", Lease: 16, KeyFunc: byUser})
	_, pl := openShared(t, dsn, 1000, time.Hour, rate.Options{Name: "loose"})
	_, pt := openShared(t, dsn, 30, time.Hour, rate.Options{Name: "tight"})
	h := rate.All(loose, tight).Handler(&login{})
	served := 0
	for range 100 {
		res, _ := serve(h, attempt("ann", false))
		if res.StatusCode != http.StatusTooManyRequests {
			served++
		}
	}
	closeLimiter(t, loose)
	closeLimiter(t, tight)
	if served != 30 {
		t.Errorf("served %d, want 30", served)
	}
	if l, tt := stored(t, pl, 1000, "ann"), stored(t, pt, 30, "ann"); l != int64(served) || tt != int64(served) {
		t.Errorf("after Close: loose holds %d, tight %d; want %d each", l, tt, served)
	}
}
