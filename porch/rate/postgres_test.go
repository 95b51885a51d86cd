package rate_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// instance is one process's limiter on a shared PostgreSQL schema.
type instance struct {
	pool *porch.Pool
	st   *postgres.Store
	lim  *rate.Limiter

	stopped bool
}

func newInstance(t *testing.T, dsn string, limit int, window time.Duration) *instance {
	t.Helper()
	in, err := openInstance(t, dsn, limit, window)
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return in
}

// openInstance is newInstance that returns rate.New's error; the store and
// pool it opened are closed at cleanup either way.
func openInstance(t *testing.T, dsn string, limit int, window time.Duration) (*instance, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	in := &instance{pool: porch.NewPool(porch.PoolOptions{}), st: st}
	t.Cleanup(func() { in.stop(t) })
	in.lim, err = rate.New(in.pool, st, limit, window, rate.Options{})
	return in, err
}

// stop closes the pool, then the store, as App does; it is safe to call twice.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.stopped {
		return
	}
	in.stopped = true
	if err := in.pool.Close(context.Background()); err != nil {
		t.Errorf("close pool: %v", err)
	}
	if err := in.st.Close(context.Background()); err != nil {
		t.Errorf("close store: %v", err)
	}
}

// Two instances on one database share one limit: across both, exactly N
// requests are allowed, however the requests interleave.
func TestSharedLimitIsExactAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, perInstance = 100, 300
	a := newInstance(t, dsn, limit, time.Hour)
	b := newInstance(t, dsn, limit, time.Hour)
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, in := range []*instance{a, b} {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				v, err := in.lim.AllowKey(context.Background(), "rate:default:ip:192.0.2.1")
				if err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				if v.Allowed {
					allowed.Add(1)
				} else {
					refused.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Fatalf("allowed %d across two instances, want exactly %d", got, limit)
	}
	if got := refused.Load(); got != 2*perInstance-limit {
		t.Fatalf("refused %d, want %d", got, 2*perInstance-limit)
	}
}

// A restart of every instance resumes the shared counters.
func TestSharedLimitSurvivesRestart(t *testing.T) {
	dsn := pgtest.DSN(t)
	const key = "rate:default:ip:192.0.2.2"
	a := newInstance(t, dsn, 3, time.Hour)
	for i := range 3 {
		v, err := a.lim.AllowKey(context.Background(), key)
		if err != nil || !v.Allowed {
			t.Fatalf("request %d: allowed %v, err %v; want allowed", i+1, v.Allowed, err)
		}
		if want := int64(2 - i); v.Remaining != want {
			t.Fatalf("request %d: Remaining %d, want %d", i+1, v.Remaining, want)
		}
	}
	a.stop(t)
	b := newInstance(t, dsn, 3, time.Hour)
	v, err := b.lim.AllowKey(context.Background(), key)
	if err != nil {
		t.Fatalf("Allow after restart: %v", err)
	}
	if v.Allowed {
		t.Fatal("allowed after a restart at the limit, want refused")
	}
	if left := time.Until(v.ResetAt); left <= 0 || left > time.Hour {
		t.Fatalf("ResetAt is %s away, want within the hour window", left)
	}
}

// Losing the database connection fails closed: a request is either refused
// with an error or counted, never allowed uncounted, and counting resumes
// once the pool reconnects.
func TestSharedLimitFailsClosedOnConnectionLoss(t *testing.T) {
	app := "porch_loss_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dsn := pgtest.WithParam(pgtest.DSN(t), "application_name", app)
	in := newInstance(t, dsn, 100, time.Hour)
	const key = "rate:default:ip:192.0.2.3"
	ctx := context.Background()
	if _, err := in.lim.AllowKey(ctx, key); err != nil {
		t.Fatalf("first Allow: %v", err)
	}
	var killed int
	err := in.st.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminate backends: killed %d, err %v", killed, err)
	}
	allowed, failed := int64(1), 0
	for range 5 {
		v, err := in.lim.AllowKey(ctx, key)
		switch {
		case err != nil:
			failed++
		case v.Allowed:
			allowed++
		default:
			t.Fatalf("refused below the limit after reconnecting")
		}
	}
	if allowed < 2 {
		t.Fatalf("only %d allowed after the connection loss (%d failed): counting did not resume", allowed, failed)
	}
	var stored int64
	if err := in.st.Pool().QueryRow(ctx, `SELECT count FROM porch_rate_counters WHERE key = $1`, key).Scan(&stored); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	if stored != allowed {
		t.Fatalf("counter is %d, want %d: every allowed request counted, no failed one", stored, allowed)
	}
	t.Logf("after the loss: %d failed (503), %d allowed", failed, allowed-1)
}

// Instances that disagree about a name's policy would write the same rows
// by different rules: while one runs, another with a different policy is
// refused, one with the same policy is not, and once every instance of the
// old policy has stopped the new one starts (a deploy). Open windows keep
// their counts under the new policy and close no later than one new window
// from now.
func TestPolicyAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newInstance(t, dsn, 2, time.Hour)
	for range 2 {
		if v, err := a.lim.Allow(context.Background(), "alice"); err != nil || !v.Allowed {
			t.Fatalf("Allow under 2/h: %+v, %v", v, err)
		}
	}
	if _, err := openInstance(t, dsn, 50, time.Hour); !errors.Is(err, store.ErrPolicyConflict) {
		t.Fatalf("a second instance with another limit: got %v, want ErrPolicyConflict", err)
	}
	if _, err := openInstance(t, dsn, 2, time.Minute); !errors.Is(err, store.ErrPolicyConflict) {
		t.Fatalf("a second instance with another window: got %v, want ErrPolicyConflict", err)
	}
	b := newInstance(t, dsn, 2, time.Hour) // the same policy: one more instance

	a.stop(t)
	if _, err := openInstance(t, dsn, 2, time.Minute); !errors.Is(err, store.ErrPolicyConflict) {
		t.Fatalf("a new policy while one old instance still runs: got %v, want ErrPolicyConflict", err)
	}
	b.stop(t)
	c := newInstance(t, dsn, 2, time.Minute)
	v, err := c.lim.Allow(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed {
		t.Fatal("after the policy changed: allowed, want the open window's 2 hits kept")
	}
	if left := time.Until(v.ResetAt); left > time.Minute+5*time.Second {
		t.Fatalf("after the window shrank to 1m: resets in %s, want at most a new window", left)
	}
}
