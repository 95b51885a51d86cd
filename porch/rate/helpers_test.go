package rate_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// t0 is a whole second, so header arithmetic in the tests stays exact.
var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// rig is one limiter over its own pool and SQLite file, on a fake clock.
type rig struct {
	path  string
	clock *porchtest.FakeClock
	pool  *porch.Pool
	st    *sqlite.Store
	lim   *rate.Limiter
}

type rigOptions struct {
	path  string               // if empty, a fresh file
	clock *porchtest.FakeClock // if nil, a fake clock at t0
	pool  porch.PoolOptions
	rate  rate.Options
}

// newRig opens a store, starts a pool and builds a limiter of limit per
// window. At cleanup the pool closes before the store, as App does it.
func newRig(t *testing.T, limit int, window time.Duration, o rigOptions) *rig {
	t.Helper()
	if o.path == "" {
		o.path = filepath.Join(t.TempDir(), "porch.db")
	}
	if o.clock == nil {
		o.clock = porchtest.NewFakeClock(t0)
	}
	st, err := sqlite.Open(o.path, sqlite.Options{Options: store.Options{Clock: o.clock}})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { closeBounded(t, "store", st.Close) })
	pool := porch.NewPool(o.pool)
	t.Cleanup(func() { closeBounded(t, "pool", pool.Close) })
	lim, err := rate.New(pool, st, limit, window, o.rate)
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return &rig{path: o.path, clock: o.clock, pool: pool, st: st, lim: lim}
}

// closeBounded closes what a rig opened at cleanup, within a bound: an
// actor or a write that never finishes then fails the test that left it,
// which still reports its own failure, instead of hanging the package
// until go test's timeout. Other errors are left to the test.
func closeBounded(t *testing.T, what string, close func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := close(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close %s at cleanup: %v", what, err)
	}
}

// stop closes the pool, then the store, as a graceful shutdown does.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	if err := r.pool.Close(context.Background()); err != nil {
		t.Fatalf("close pool: %v", err)
	}
	if err := r.st.Close(context.Background()); err != nil {
		t.Fatalf("close store: %v", err)
	}
}

// request is a request from the client at remoteAddr.
func request(remoteAddr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	return r
}

// allowKey counts one request against a counter key and fails the test on
// error.
func (r *rig) allowKey(t *testing.T, key string) rate.Verdict {
	t.Helper()
	v, err := r.lim.AllowKey(context.Background(), key)
	if err != nil {
		t.Fatalf("allow %q: %v", key, err)
	}
	return v
}

// allow counts one request for principal through the public Allow and
// fails the test on error.
func (r *rig) allow(t *testing.T, principal string) rate.Verdict {
	t.Helper()
	v, err := r.lim.Allow(context.Background(), principal)
	if err != nil {
		t.Fatalf("allow %q: %v", principal, err)
	}
	return v
}

// storedCount reads key's counter row.
func storedCount(t *testing.T, db *sql.DB, key string) (count int64, windowStart time.Time, ok bool) {
	t.Helper()
	var start int64
	err := db.QueryRow(`SELECT count, window_start FROM porch_rate_current WHERE key = ?`, key).Scan(&count, &start)
	if err == sql.ErrNoRows {
		return 0, time.Time{}, false
	}
	if err != nil {
		t.Fatalf("read counter %q: %v", key, err)
	}
	return count, time.UnixMilli(start), true
}

// wiring puts a limiter in front of a handler one of the two supported ways.
type wiring struct {
	name string
	wrap func(l *rate.Limiter, h http.Handler) http.Handler
}

var wirings = []wiring{
	{"porch.Chain", func(l *rate.Limiter, h http.Handler) http.Handler { return porch.Chain(l)(h) }},
	{"Limiter.Handler", func(l *rate.Limiter, h http.Handler) http.Handler { return l.Handler(h) }},
}

// counted is a handler that answers 200 "ok" and counts its runs.
type counted struct{ runs atomic.Int64 }

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.runs.Add(1)
	w.Write([]byte("ok"))
}

// wantProblem checks that res is a problem+json answer of status and
// type, with a Retry-After of whole seconds.
func wantProblem(t *testing.T, res *http.Response, body []byte, status int, typ string) {
	t.Helper()
	testkit.WantProblem(t, res.StatusCode, res.Header, body, status, typ)
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("got Retry-After %q, want whole seconds >= 1", res.Header.Get("Retry-After"))
	}
}

// serve runs h on req and returns the recorded response and body.
func serve(h http.Handler, req *http.Request) (*http.Response, []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), rec.Body.Bytes()
}

// blockActors parks the only actor of a Size 1 pool and fills its mailbox,
// so the next Send is refused. release unblocks it and returns once the
// mailbox is empty again; it is idempotent and runs at cleanup.
func blockActors(t *testing.T, pool *porch.Pool) (release func()) {
	t.Helper()
	if pool.Size() != 1 {
		t.Fatalf("blockActors wants a pool of one actor, got %d", pool.Size())
	}
	started, unblock := make(chan struct{}), make(chan struct{})
	if err := actor.Of(pool).Send("block", func(int) { close(started); <-unblock }); err != nil {
		t.Fatal(err)
	}
	<-started
	drained := make(chan struct{})
	for i := range actor.Of(pool).Mailbox() {
		job := func(int) {}
		if i == actor.Of(pool).Mailbox()-1 {
			job = func(int) { close(drained) }
		}
		if err := actor.Of(pool).Send("fill", job); err != nil {
			t.Fatalf("fill mailbox: %v", err)
		}
	}
	var once sync.Once
	release = func() {
		once.Do(func() { close(unblock) })
		<-drained
	}
	t.Cleanup(release)
	return release
}

// getAtOnce sends n GETs to url in parallel, released together, and counts
// their statuses.
func getAtOnce(t *testing.T, client *http.Client, url string, n int) map[int]int64 {
	t.Helper()
	start := make(chan struct{})
	var mu sync.Mutex
	got := map[int]int64{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			res, err := client.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			mu.Lock()
			got[res.StatusCode]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return got
}
