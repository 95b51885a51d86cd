package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// waitLimit bounds every wait: a deadline that means the middleware hung,
// never a sleep.
const waitLimit = 10 * time.Second

// openSQLite opens a store in a fresh temporary directory and closes it on
// cleanup.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{})
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

// newMiddleware builds the middleware over st; cleanup closes its pool
// before st (opened earlier) closes.
func newMiddleware(t *testing.T, st driver.KeyStore, opt Options, popt porch.PoolOptions) *Keys {
	t.Helper()
	pool := porch.NewPool(popt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := pool.Close(ctx); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return New(pool, st, opt)
}

// inFlight counts the keys with a flight, reading each shard on its own
// actor after it dropped the flights that ended, as its next join would.
func inFlight(t *testing.T, m *Keys) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	total := 0
	for i := range m.shards {
		reply := actor.NewReply[int]()
		if err := m.pool.SendShard(i, false, func(i int) { m.shards[i].drain(); reply.Send(len(m.shards[i].flights), nil) }); err != nil {
			t.Fatalf("ask shard %d: %v", i, err)
		}
		n, err := reply.Wait(ctx)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		total += n
	}
	return total
}

func post(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set(Header, "k")
	return r
}

// TestNoFlightOutlivesItsRequest: whatever the outcome, once a request has
// been answered no flight is left behind for its key. A leaked flight would
// park every later duplicate behind an owner that no longer exists.
func TestNoFlightOutlivesItsRequest(t *testing.T) {
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter)
		bodies  []string
		want    []int
	}{
		{"stored, replayed, refused", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("created"))
		},
			[]string{"a", "a", "b"}, []int{201, 201, 422}},
		{"handler 500", func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
			[]string{"a", "a"}, []int{500, 500}},
		{"handler panic", func(http.ResponseWriter) { panic("boom") },
			[]string{"a"}, []int{500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{Size: 4})
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.handler(w) }))
			for i, body := range tc.bodies {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, post(body))
				if rec.Code != tc.want[i] {
					t.Errorf("request %d: got %d, want %d", i, rec.Code, tc.want[i])
				}
				if n := inFlight(t, m); n != 0 {
					t.Errorf("after request %d: got %d flights, want 0", i, n)
				}
			}
		})
	}
}

func TestNoFlightAfterFailedWrite(t *testing.T) {
	st := openSQLite(t)
	m := newMiddleware(t, st, Options{}, porch.PoolOptions{Size: 4})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))
	if _, err := st.DB().Exec(`CREATE TRIGGER idem_boom BEFORE INSERT ON porch_idem_responses
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("a"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("failed write: got %d, want 503", rec.Code)
	}
	if n := inFlight(t, m); n != 0 {
		t.Errorf("flights: got %d, want 0", n)
	}
}

// hookedStore lets a test act when a leader reserves its key. Its
// reservations honour their context, as the Store contract asks.
type hookedStore struct {
	*sqlite.Store
	// reserve, if set, runs at the start of every Reserve; an error it
	// returns is Reserve's.
	reserve func(ctx context.Context) error
}

func (s *hookedStore) Reserve(ctx context.Context, key string) (driver.Reservation, error) {
	if s.reserve != nil {
		if err := s.reserve(ctx); err != nil {
			return nil, err
		}
	}
	r, err := s.Store.Reserve(ctx, key)
	if err != nil {
		return nil, err
	}
	return ctxReservation{r}, nil
}

type ctxReservation struct{ driver.Reservation }

func (r ctxReservation) Load(ctx context.Context) (driver.Response, bool, error) {
	if err := ctx.Err(); err != nil {
		return driver.Response{}, false, err
	}
	return r.Reservation.Load(ctx)
}

// parkedFrame is wait as it appears in a goroutine dump; parked duplicates
// are registered nowhere else.
const parkedFrame = "porch/idem.(*Keys).wait("

// serveAsync serves req on its own goroutine; the channel yields the status.
func serveAsync(h http.Handler, req *http.Request) <-chan int {
	code := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code <- rec.Code
	}()
	return code
}

func status(t *testing.T, code <-chan int, what string) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(waitLimit):
		t.Fatalf("%s never returned", what)
		return 0
	}
}

// created201 answers 201 with a body, so that the response can be stored.
func created201(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("created"))
	})
}

// TestCallerGoneBeforeJoinAnswered: a request that stops waiting before the
// actor has answered it is still made leader when the actor gets to it. The
// middleware must hand that lead back, or the key is wedged and every later
// request parks forever.
func TestCallerGoneBeforeJoinAnswered(t *testing.T) {
	m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{Size: 1})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))

	busy, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(free)
	if err := m.pool.Send("blocker", func(int) { close(busy); <-unblock }); err != nil {
		t.Fatalf("block the actor: %v", err)
	}
	<-busy

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := status(t, serveAsync(h, post("a").WithContext(ctx)), "the request whose context ended"); got == http.StatusCreated {
		t.Errorf("gone caller: got %d, want a refusal", got)
	}
	free()
	if n := inFlight(t, m); n != 0 {
		t.Fatalf("flights after the caller left: got %d, want 0 (key wedged)", n)
	}
	if got := status(t, serveAsync(h, post("a")), "the next request"); got != http.StatusCreated {
		t.Errorf("next request: got %d, want 201", got)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestLeaderGoneWhileReserving: a leader whose context ends while it reserves
// the key has learned nothing about it, so a parked duplicate must not be
// failed: it leads afresh and runs the handler.
func TestLeaderGoneWhileReserving(t *testing.T) {
	hs := &hookedStore{Store: openSQLite(t)}
	m := newMiddleware(t, hs, Options{}, porch.PoolOptions{})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reserving, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hs.reserve = func(context.Context) error {
		once.Do(func() {
			close(reserving)
			<-proceed
			cancel() // the leader's client goes away mid-reservation
		})
		return nil
	}

	leader := serveAsync(h, post("a").WithContext(ctx))
	<-reserving
	waiter := serveAsync(h, post("a"))
	testkit.WaitStacks(t, parkedFrame, 1, waitLimit)
	close(proceed)

	if got := status(t, leader, "the leader"); got == http.StatusCreated {
		t.Errorf("leader that left: got %d, want a refusal", got)
	}
	if got := status(t, waiter, "the waiter"); got != http.StatusCreated {
		t.Errorf("waiter: got %d, want 201 (it leads once the leader left)", got)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestWaitersBehindALeaderThatFindsARow: a leader that finds a stored
// response answers its waiters from it: a replay for the same request, 422
// for a different one, and the handler does not run.
func TestWaitersBehindALeaderThatFindsARow(t *testing.T) {
	hs := &hookedStore{Store: openSQLite(t)}
	m := newMiddleware(t, hs, Options{}, porch.PoolOptions{})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))
	if got := status(t, serveAsync(h, post("a")), "the first request"); got != http.StatusCreated {
		t.Fatalf("first request: got %d, want 201", got)
	}

	reserving, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hs.reserve = func(context.Context) error {
		once.Do(func() {
			close(reserving)
			<-proceed
		})
		return nil
	}
	leader := serveAsync(h, post("a"))
	<-reserving
	same := serveAsync(h, post("a"))
	other := serveAsync(h, post("b"))
	testkit.WaitStacks(t, parkedFrame, 2, waitLimit)
	close(proceed)

	for _, c := range []struct {
		name string
		code <-chan int
		want int
	}{
		{"leader", leader, http.StatusCreated},
		{"same request", same, http.StatusCreated},
		{"different body", other, http.StatusUnprocessableEntity},
	} {
		if got := status(t, c.code, c.name); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestReserveFails: a store that cannot reserve fails closed. The leader and
// its parked duplicate get 503, the handler never runs, and the key is free
// once the store recovers.
func TestReserveFails(t *testing.T) {
	hs := &hookedStore{Store: openSQLite(t)}
	m := newMiddleware(t, hs, Options{}, porch.PoolOptions{})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))

	errBoom := errors.New("boom")
	reserving, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hs.reserve = func(context.Context) error {
		err := error(nil)
		once.Do(func() {
			close(reserving)
			<-proceed
			err = errBoom
		})
		return err
	}

	leader := serveAsync(h, post("a"))
	<-reserving
	waiter := serveAsync(h, post("a"))
	testkit.WaitStacks(t, parkedFrame, 1, waitLimit)
	close(proceed)

	for _, c := range []struct {
		name string
		code <-chan int
	}{{"leader", leader}, {"waiter", waiter}} {
		if got := status(t, c.code, c.name); got != http.StatusServiceUnavailable {
			t.Errorf("%s: got %d, want 503", c.name, got)
		}
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("handler calls: got %d, want 0", got)
	}
	if n := inFlight(t, m); n != 0 {
		t.Errorf("flights: got %d, want 0", n)
	}
	if got := status(t, serveAsync(h, post("a")), "the retry"); got != http.StatusCreated {
		t.Errorf("retry once the store works: got %d, want 201", got)
	}
}

// TestReserveNotFreeInTime: a shared store that gives up waiting for a key
// another owner holds (postgres.Options.Timeout: an owner on another
// instance, or one whose process died mid-COMMIT) fails with
// store.ErrKeyHeld: the request is in flight, 409 with Retry-After, as
// when MaxWait runs out; the handler does not run, and the key is free
// for the retry.
func TestReserveNotFreeInTime(t *testing.T) {
	hs := &hookedStore{Store: openSQLite(t)}
	m := newMiddleware(t, hs, Options{}, porch.PoolOptions{})
	var calls atomic.Int64
	h := m.Handler(created201(&calls))
	var once sync.Once
	hs.reserve = func(context.Context) error {
		err := error(nil)
		once.Do(func() { err = fmt.Errorf("postgres: reserve: %w: not free within 3s", store.ErrKeyHeld) })
		return err
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("a"))
	if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a key not free in time: got %d, Retry-After %q; want 409 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("handler calls: got %d, want 0", got)
	}
	if got := status(t, serveAsync(h, post("a")), "the retry"); got != http.StatusCreated {
		t.Errorf("retry once the key is free: got %d, want 201", got)
	}
}

// TestDuplicateGoneBeforeJoinKeepsLeadersFlight: a duplicate whose context
// ends while its join is still queued on a busy actor hands back a lead it
// may have been granted. It was not granted one (the owner leads), so the
// owner's flight must stay: a zero-size caller token made every caller
// "equal" to the leader, the duplicate's hand-back ended the owner's flight,
// and the next duplicate led and ran the handler a second time.
func TestDuplicateGoneBeforeJoinKeepsLeadersFlight(t *testing.T) {
	m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{Size: 1})
	var calls atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("created"))
	}))
	owner := serveAsync(h, post("a"))
	<-entered // the owner leads and runs

	busy, unblock := make(chan struct{}), make(chan struct{})
	if err := m.pool.Send("blocker", func(int) { close(busy); <-unblock }); err != nil {
		t.Fatalf("block the actor: %v", err)
	}
	<-busy
	for range 8 { // each join is queued behind the blocker, then abandoned
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if got := status(t, serveAsync(h, post("a").WithContext(ctx)), "an abandoned duplicate"); got != http.StatusServiceUnavailable {
			t.Errorf("abandoned duplicate: got %d, want 503", got)
		}
	}
	close(unblock)
	if n := inFlight(t, m); n != 1 {
		t.Fatalf("flights after abandoned duplicates: got %d, want 1 (the owner's)", n)
	}
	dup := serveAsync(h, post("a"))
	testkit.WaitStacks(t, parkedFrame, 1, waitLimit)
	close(release)
	if got := status(t, owner, "the owner"); got != http.StatusCreated {
		t.Errorf("owner: got %d, want 201", got)
	}
	if got := status(t, dup, "the duplicate"); got != http.StatusCreated {
		t.Errorf("duplicate: got %d, want a 201 replay", got)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestEndedListFull: a flight that ends while its shard's ended list is
// full (its actor has not joined since that many ended) is dropped by a
// message to the actor instead, so its key is not left led by a flight
// nobody runs.
func TestEndedListFull(t *testing.T) {
	m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{Size: 1})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	f, leads, err := m.begin(ctx, "a")
	if err != nil || !leads {
		t.Fatalf("begin: got leads %v, err %v; want to lead", leads, err)
	}
	sh := m.shards[0]
	for range cap(sh.ended) {
		other := newFlight("other")
		other.ended.Store(true)
		sh.ended <- endedFlight{key: other.key, f: weak.Make(other)}
	}
	m.finish(f, released())
	if n := len(sh.ended); n != cap(sh.ended) {
		t.Fatalf("ended list: got %d, want it still full (%d)", n, cap(sh.ended))
	}
	// The count drains the list first, which holds only the others: the
	// key is free only if finish told the actor.
	if n := inFlight(t, m); n != 0 {
		t.Fatalf("flights: got %d, want 0 (key wedged)", n)
	}
	if _, leads, err := m.begin(ctx, "a"); err != nil || !leads {
		t.Errorf("next begin: got leads %v, err %v; want to lead", leads, err)
	}
}
