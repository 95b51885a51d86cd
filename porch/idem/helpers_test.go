package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// waitLimit bounds every wait in these tests. It is a deadline, not a sleep:
// each wait returns as soon as its condition holds, and reaching the limit
// means the middleware hung, which is a failure.
const waitLimit = 10 * time.Second

// env is one middleware under test: a real SQLite file in the test's
// temporary directory, a pool, and a server on port 0 in front of
// m.Handler(inner).
type env struct {
	pool    *porch.Pool
	store   *sqlite.Store // nil when the env runs on another store (newEnvOn)
	m       *idem.Keys
	handler http.Handler // m.Handler(inner), for requests a test builds by hand
	srv     *httptest.Server
}

// envConfig is what a test may vary; the zero value is the defaults.
type envConfig struct {
	opt   idem.Options
	pool  porch.PoolOptions
	store store.Options
}

// newEnv builds an env. Cleanup closes the server (waiting for its
// handlers), then the pool, then the store. A test that blocks a handler must
// register the release with t.Cleanup after calling newEnv, so that it runs
// before the server waits for that handler.
func newEnv(t *testing.T, cfg envConfig, inner http.Handler) *env {
	t.Helper()
	st := openStore(t, cfg.store)
	e := newEnvOn(t, st, cfg, inner)
	e.store = st
	return e
}

// newEnvOn is newEnv on a store the caller opened (and closes on cleanup,
// registered before this call); cfg.store is not used.
func newEnvOn(t *testing.T, st driver.KeyStore, cfg envConfig, inner http.Handler) *env {
	t.Helper()
	pool := newPool(t, cfg.pool)
	m := idem.New(pool, st, cfg.opt)
	e := &env{pool: pool, m: m, handler: m.Handler(inner)}
	e.srv = httptest.NewServer(e.handler)
	t.Cleanup(e.srv.Close)
	return e
}

// openStore opens a SQLite store in a fresh temporary directory and closes
// it on cleanup.
func openStore(t *testing.T, opt store.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{Options: opt})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := st.Close(ctx); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// newPool starts a pool and closes it on cleanup, waiting for its actors.
// Call it after openStore, so that the pool closes before the store.
func newPool(t *testing.T, opt porch.PoolOptions) *porch.Pool {
	t.Helper()
	pool := porch.NewPool(opt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := pool.Close(ctx); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return pool
}

// result is a response as the client saw it.
type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) replayed() bool { return r.header.Get(idem.ReplayedHeader) == "true" }

func (r result) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// send makes one request to the env's server. Each of keys becomes one
// Idempotency-Key header; with none the header is absent. It is safe to call
// from any goroutine.
func (e *env) send(ctx context.Context, method, path, body string, keys ...string) (result, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	for _, k := range keys {
		req.Header.Add(idem.Header, k)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return result{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return result{}, err
	}
	return result{status: res.StatusCode, header: res.Header, body: b}, nil
}

// do is send from the test goroutine, failing the test on a transport error
// or a response that takes longer than waitLimit.
func (e *env) do(t *testing.T, method, path, body string, keys ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	r, err := e.send(ctx, method, path, body, keys...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// serve runs req through the middleware without the network, for headers a
// client would refuse to send and contexts the test cancels itself.
func (e *env) serve(req *http.Request) result {
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	return result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// rows reports how many responses porch_idem_responses holds, read through
// the store's database handle as an operator would.
func (e *env) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.store.DB().QueryRow(`SELECT count(*) FROM porch_idem_responses`).Scan(&n); err != nil {
		t.Fatalf("count stored responses: %v", err)
	}
	return n
}

// wantProblem checks that got is an application/problem+json refusal with
// status and type.
func wantProblem(t *testing.T, got result, status int, typ string) {
	t.Helper()
	testkit.WantProblem(t, got.status, got.header, got.body, status, typ)
}

// wantRetryAfter checks that got carries a Retry-After of whole seconds, at
// least one.
func wantRetryAfter(t *testing.T, got result) {
	t.Helper()
	ra := got.header.Get("Retry-After")
	var secs int
	if _, err := fmt.Sscanf(ra, "%d", &secs); err != nil || secs < 1 {
		t.Errorf("Retry-After: got %q, want a positive number of seconds", ra)
	}
}

// orders is the handler under test. Every call is one execution the
// middleware let through; calls numbers them from 1, so a row count is never
// needed to tell how often the side effect ran.
type orders struct {
	calls atomic.Int64
	// fn answers call n; if nil, created.
	fn func(n int64, w http.ResponseWriter, r *http.Request)
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.calls.Add(1)
	if o.fn != nil {
		o.fn(n, w, r)
		return
	}
	created(n, w, r)
}

// created answers 201 with a JSON body naming the call and echoing the
// request, plus headers a replay must not repeat.
func created(n int64, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Set-Cookie", fmt.Sprintf("session=%d", n))
	w.Header().Set("X-Custom", "from-handler")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"call":%d,"method":%q,"uri":%q,"body":%q}`, n, r.Method, r.URL.RequestURI(), body)
}

// gate holds a handler call inside the handler until the test opens it.
// Create it before the env (its handler refers to it) and register open with
// t.Cleanup after newEnv, so a failing test never leaves a handler blocked.
type gate struct {
	entered chan struct{} // closed when the first call is inside the handler
	release chan struct{}

	enterOnce, openOnce sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{})}
}

// hold runs in the handler: it announces the call and blocks until open.
func (g *gate) hold() {
	g.enterOnce.Do(func() { close(g.entered) })
	<-g.release
}

func (g *gate) open() { g.openOnce.Do(func() { close(g.release) }) }

// waitEntered returns once a call is inside the handler.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitLimit):
		t.Fatal("the handler was never entered")
	}
}

// parkedFrame is the middleware's wait for a running owner as it appears in a
// goroutine dump. Parked duplicates are registered nowhere (see flight.go),
// so the dump is the one place that counts them without a hook in the code.
const parkedFrame = "porch/idem.(*Keys).wait("

// waitParked polls until exactly n requests are parked behind a running
// owner. While it waits the handler must not run more than calls times: a
// design that lets duplicates through runs them instead of parking them, and
// fails here.
func waitParked(t *testing.T, n int, o *orders, calls int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if c := o.calls.Load(); c > calls {
			t.Fatalf("handler calls while duplicates should park: got %d, want %d", c, calls)
		}
		got := testkit.CountStacks(parkedFrame)
		if got == n {
			return
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("parked duplicates: got %d, want %d", got, n)
		}
		<-tick.C
	}
}

// sendAll sends n copies of one request at once and returns their results in
// no particular order. Every goroutine waits on a shared start signal, so the
// requests are released together.
func (e *env) sendAll(t *testing.T, n int, method, path string, body func(i int) string, key func(i int) string) (wait func() []result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	results := make([]result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.send(ctx, method, path, body(i), key(i))
		})
	}
	close(start)
	return func() []result {
		t.Helper()
		wg.Wait()
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		return results
	}
}

func same(s string) func(int) string { return func(int) string { return s } }

// porchOptions is the pool the transaction tests use: small, since each
// request is sequential.
func porchOptions() porch.PoolOptions { return porch.PoolOptions{Size: 2} }
