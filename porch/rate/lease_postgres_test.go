package rate_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// stored is what the store holds of principal's count under lim's policy,
// read by a limiter of its own without a lease: limit − Remaining.
func stored(t *testing.T, lim *rate.Limiter, limit int64, principal string) int64 {
	t.Helper()
	v, err := lim.Peek(context.Background(), principal)
	if err != nil {
		t.Fatalf("Peek %q: %v", principal, err)
	}
	return limit - v.Remaining
}

// allowAtOnce sends perLimiter requests of principal to each of lims, all
// released at once, and returns how many were allowed.
func allowAtOnce(t *testing.T, lims []*rate.Limiter, perLimiter int, principal string) int64 {
	t.Helper()
	var served atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, lim := range lims {
		for range perLimiter {
			wg.Go(func() {
				<-start
				v, err := lim.Allow(context.Background(), principal)
				if err != nil {
					t.Error(err)
					return
				}
				if v.Allowed {
					served.Add(1)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return served.Load()
}

func closeLimiter(t *testing.T, lim *rate.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lim.Close(ctx); err != nil {
		t.Fatalf("close limiter: %v", err)
	}
}

// A busy key's hits are answered from its lease: a thousand sequential
// hits cost a few dozen store writes rather than a thousand, and once the
// limiter closes the store holds exactly the hits answered. Without a
// lease every hit is a write.
func TestLeaseSavesRoundTrips(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, hits = 1_000_000, 1000
	for _, c := range []struct {
		name      string
		lease     int
		maxWrites int64
	}{{"lease", 64, 50}, {"off", 0, hits}} {
		t.Run(c.name, func(t *testing.T) {
			opt := rate.Options{Name: "lease-" + c.name, Lease: c.lease}
			st, lim := openShared(t, dsn, limit, time.Hour, opt)
			_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: opt.Name})
			before := st.Stats().Writes
			for i := range hits {
				v, err := lim.Allow(context.Background(), "ann")
				if err != nil || !v.Allowed {
					t.Fatalf("hit %d: got %+v, %v; want allowed", i+1, v, err)
				}
				if want := int64(limit - i - 1); v.Remaining != want {
					t.Fatalf("hit %d: Remaining %d, want %d", i+1, v.Remaining, want)
				}
			}
			writes := st.Stats().Writes - before
			if writes > c.maxWrites {
				t.Fatalf("%d hits cost %d store writes, want at most %d", hits, writes, c.maxWrites)
			}
			closeLimiter(t, lim)
			if got := stored(t, peek, limit, "ann"); got != hits {
				t.Fatalf("after Close the store holds %d hits, want the %d answered", got, hits)
			}
			t.Logf("%d hits, %d store writes", hits, writes)
		})
	}
}

// Two instances with leases hammering one key never serve past the limit,
// and once both close the store holds exactly what they served: a lease's
// hits are counted before they are answered, and what was not answered is
// given back.
func TestLeaseNeverOverServesAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, perInstance, lease = 100, 300, 16
	opt := rate.Options{Name: "lease-two", Lease: lease}
	var lims []*rate.Limiter
	for range 2 {
		_, lim := openShared(t, dsn, limit, time.Hour, opt)
		lims = append(lims, lim)
	}
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: opt.Name})
	// Warm both leases up, so that the hammer below runs on them.
	for range 20 {
		for _, lim := range lims {
			if _, err := lim.Allow(context.Background(), "ann"); err != nil {
				t.Fatal(err)
			}
		}
	}
	served := 40 + allowAtOnce(t, lims, perInstance, "ann")
	if got := served; got > limit {
		t.Fatalf("served %d, over the limit of %d", got, limit)
	} else if got < limit-2*lease {
		t.Fatalf("served %d, want at least %d (the limit less what two leases hold)", got, limit-2*lease)
	}
	for _, lim := range lims {
		closeLimiter(t, lim)
	}
	if got := stored(t, peek, limit, "ann"); got != served {
		t.Fatalf("after Close the store holds %d, want the %d served", got, served)
	}
	t.Logf("served %d of %d", served, limit)
}

// A key idle on this instance for LeaseIdle gives its lease back: another
// instance then sees exactly the hits answered, without a Close.
func TestLeaseGivenBackWhenIdle(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, hits = 1000, 40
	opt := rate.Options{Name: "lease-idle", Lease: 64}
	_, lim := openShared(t, dsn, limit, time.Hour, opt)
	t.Cleanup(func() { closeLimiter(t, lim) })
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: opt.Name})
	for range hits {
		if v, err := lim.Allow(context.Background(), "ann"); err != nil || !v.Allowed {
			t.Fatalf("got %+v, %v; want allowed", v, err)
		}
	}
	// Right after the hits the store holds the lease's count ahead, unless
	// the read itself came later than LeaseIdle (a loaded machine), when
	// the lease may be given back already.
	idle := time.Now()
	if got := stored(t, peek, limit, "ann"); got <= hits && time.Since(idle) < rate.LeaseIdle {
		t.Fatalf("right after the hits the store holds %d: no lease was taken", got)
	}
	for stored(t, peek, limit, "ann") != hits {
		if waited := time.Since(idle); waited > 10*rate.LeaseIdle {
			t.Fatalf("the lease was not given back %s after the key went idle (store holds %d, want %d)", waited, stored(t, peek, limit, "ann"), hits)
		}
		time.Sleep(rate.LeaseIdle / 10)
	}
	t.Logf("given back %s after the last hit", time.Since(idle).Round(time.Millisecond))
}

// A Reset drops the key's lease: its hits were counted before the reset,
// which the store has wiped, so the hits after it are counted anew rather
// than answered from the old lease.
func TestLeaseDroppedByReset(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 1000
	opt := rate.Options{Name: "lease-reset", Lease: 64}
	_, lim := openShared(t, dsn, limit, time.Hour, opt)
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: opt.Name})
	ctx := context.Background()
	for range 30 {
		if _, err := lim.Allow(ctx, "ann"); err != nil {
			t.Fatal(err)
		}
	}
	if err := lim.Reset(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		v, err := lim.Allow(ctx, "ann")
		if err != nil || !v.Allowed {
			t.Fatalf("hit %d after Reset: got %+v, %v", i+1, v, err)
		}
		if want := int64(limit - i - 1); v.Remaining != want {
			t.Fatalf("hit %d after Reset: Remaining %d, want %d", i+1, v.Remaining, want)
		}
	}
	closeLimiter(t, lim)
	if got := stored(t, peek, limit, "ann"); got != 5 {
		t.Fatalf("the store holds %d after Reset and 5 hits, want 5", got)
	}
}

// A hit given back (Options.CountStatus) goes back into the key's lease:
// no round trip, and once the limiter closes the store holds exactly the
// hits that stood.
func TestLeaseTakesBackHits(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 1000
	opt := rate.Options{Name: "lease-status", Lease: 64, KeyFunc: byUser, CountStatus: rate.Failures}
	st, lim := openShared(t, dsn, limit, time.Hour, opt)
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: opt.Name})
	h := lim.Handler(&login{})
	var failed int64
	for i := range 100 {
		ok := i%3 != 0 // two of three succeed, and are given back
		if i == 50 {
			before := st.Stats().Writes
			defer func() {
				if w := st.Stats().Writes - before; w > 10 {
					t.Errorf("the last 50 requests cost %d store writes, want their give-backs to go into the lease", w)
				}
			}()
		}
		res, _ := serve(h, attempt("ann", ok))
		if res.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("request %d refused", i+1)
		}
		if !ok {
			failed++
		}
	}
	closeLimiter(t, lim)
	if got := stored(t, peek, limit, "ann"); got != failed {
		t.Fatalf("the store holds %d, want the %d failed attempts", got, failed)
	}
}

// A lease is refused where it would be unsound or meaningless.
func TestLeaseOptionChecked(t *testing.T) {
	st, _ := openShared(t, pgtest.DSN(t), 10, time.Minute, rate.Options{})
	for _, c := range []struct {
		name string
		opt  rate.Options
	}{
		{"negative", rate.Options{Lease: -1}},
		{"over MaxLimit", rate.Options{Lease: rate.MaxLimit + 1}},
		{"with GCRA", rate.Options{Lease: 8, Algorithm: rate.GCRA}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := porch.NewPool(porch.PoolOptions{})
			t.Cleanup(func() { pool.Close(context.Background()) })
			defer func() {
				if recover() == nil {
					t.Fatal("New did not panic")
				}
			}()
			rate.New(pool, st, 10, time.Minute, c.opt) //nolint:errcheck // it panics
		})
	}
}

// A lease's hits belong to the window they were counted in: none is
// answered once that window has closed, when the store would count the
// hit in the next one. Each allowed verdict's window (ResetAt, a fixed
// window's end) is still open when its request was sent.
func TestLeaseEndsWithItsWindow(t *testing.T) {
	dsn := pgtest.DSN(t)
	const window = 200 * time.Millisecond
	_, lim := openShared(t, dsn, 1_000_000, window, rate.Options{Name: "lease-window", Lease: 64})
	t.Cleanup(func() { closeLimiter(t, lim) })
	windows := make(map[time.Time]int)
	for end := time.Now().Add(5 * window); time.Now().Before(end); {
		sent := time.Now()
		v, err := lim.Allow(context.Background(), "ann")
		if err != nil || !v.Allowed {
			t.Fatalf("got %+v, %v; want allowed", v, err)
		}
		// The database's clock is this machine's, read to the millisecond.
		if !sent.Before(v.ResetAt.Add(2 * time.Millisecond)) {
			t.Fatalf("a hit sent at %s was answered for a window that closed at %s", sent.Format(time.StampMicro), v.ResetAt.Format(time.StampMicro))
		}
		windows[v.ResetAt.Truncate(10*time.Millisecond)]++
		// The load's pace, not a wait for anything: spread out, a lease's
		// hits would outlast its window by tens of milliseconds if it
		// were not cut at the window's end.
		time.Sleep(500 * time.Microsecond)
	}
	if len(windows) < 3 {
		t.Fatalf("the hits spanned %d windows, want several", len(windows))
	}
}
