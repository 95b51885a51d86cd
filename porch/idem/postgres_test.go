package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// pgInstance is one process's middleware on a shared PostgreSQL schema,
// behind its own server.
type pgInstance struct {
	st  *postgres.Store
	srv *httptest.Server
}

func newPGInstance(t *testing.T, dsn string, h http.Handler) *pgInstance {
	t.Helper()
	st := pgstore.Open(t, dsn, postgres.Options{}) // closed after the pool and the server, which close first
	pool := porch.NewPool(porch.PoolOptions{})
	m := idem.New(pool, st, idem.Options{RequireKey: true})
	in := &pgInstance{st: st, srv: httptest.NewServer(m.Handler(h))}
	t.Cleanup(func() {
		in.srv.Close()
		pool.Close(context.Background())
	})
	return in
}

func (in *pgInstance) post(t *testing.T, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, in.srv.URL+"/pay", strings.NewReader(body))
	if err != nil {
		t.Errorf("new request: %v", err) // post runs on other goroutines too: no Fatal
		return 0, ""
	}
	req.Header.Set(idem.Header, key)
	res, err := in.srv.Client().Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// payHandler counts executions and answers with a body unique to each
// execution, so a replay of another execution's response would show.
type payHandler struct {
	runs    atomic.Int64
	entered chan struct{} // receives once per execution, if not nil
	release chan struct{} // executions wait for it, if not nil
}

func (h *payHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	if h.entered != nil {
		h.entered <- struct{}{}
	}
	if h.release != nil {
		<-h.release
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"execution":`+strconv.FormatInt(n, 10)+`}`)
}

// Duplicates spread over two instances at once run the handler once, and
// every caller on either instance gets that one execution's response.
func TestSharedKeyRunsOnceAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	h := &payHandler{entered: make(chan struct{}, 64), release: make(chan struct{})}
	a, b := newPGInstance(t, dsn, h), newPGInstance(t, dsn, h)
	const perInstance = 10
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 2*perInstance)
	var wg sync.WaitGroup
	for _, in := range []*pgInstance{a, b} {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, body := in.post(t, "order-1", `{"amount":5}`)
				answers <- answer{s, body}
			}()
		}
	}
	<-h.entered // one owner is inside the handler; everyone else is parked
	close(h.release)
	wg.Wait()
	close(answers)
	var first *answer
	for got := range answers {
		if got.status != http.StatusCreated {
			t.Errorf("status %d (%s), want 201 for every duplicate", got.status, got.body)
		}
		if first == nil {
			first = &got
		} else if got != *first {
			t.Errorf("answer %v differs from %v", got, *first)
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times across two instances, want 1", n)
	}
}

// An owner whose process dies mid-handler (here: its connection is killed,
// which is what the server sees) must not wedge the key: a duplicate parked
// on the other instance takes it and runs the handler.
func TestSharedKeyOwnerCrashReleasesParkedDuplicate(t *testing.T) {
	dsn := pgtest.DSN(t)
	ha := &payHandler{entered: make(chan struct{}, 1), release: make(chan struct{})}
	hb := &payHandler{}
	// Application names let the test find each instance's connections
	// without touching other tests' on the same server.
	// Unique per run, so that a run of this test in another process on
	// the same server (two go test runs at once) cannot kill ours.
	appA, appB := fmt.Sprintf("porch_crash_a_%d", time.Now().UnixNano()), fmt.Sprintf("porch_crash_b_%d", time.Now().UnixNano())
	a := newPGInstance(t, pgtest.WithParam(dsn, "application_name", appA), ha)
	b := newPGInstance(t, pgtest.WithParam(dsn, "application_name", appB), hb)
	t.Cleanup(func() { close(ha.release) }) // before a's server waits for its handler
	go a.post(t, "order-2", `{"amount":7}`)
	select {
	case <-ha.entered: // a owns the key and holds its advisory lock
	case <-time.After(10 * time.Second):
		t.Fatal("a's handler never ran")
	}
	done := make(chan int, 1)
	go func() {
		s, _ := b.post(t, "order-2", `{"amount":7}`)
		done <- s
	}()
	// Kill a's connections: a crashed process's locks go with them.
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		// b's leader is blocked on the lock once an ungranted advisory lock shows.
		if err := b.st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid)
			WHERE l.locktype = 'advisory' AND NOT l.granted AND s.application_name = $1`, appB).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's duplicate never waited on the key's lock")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's lock table; nothing can signal it
	}
	if _, err := b.st.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1`, appA); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-done:
		if s != http.StatusCreated {
			t.Fatalf("b's duplicate got %d, want 201 from running the handler itself", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's duplicate is still parked after the owner died: the key is wedged")
	}
	if n := hb.runs.Load(); n != 1 {
		t.Fatalf("b ran the handler %d times, want 1", n)
	}
	// A further retry replays b's response rather than running again.
	if s, _ := b.post(t, "order-2", `{"amount":7}`); s != http.StatusCreated || hb.runs.Load() != 1 {
		t.Fatalf("retry: status %d, runs %d; want a 201 replay and still 1 run", s, hb.runs.Load())
	}
}

// The owner's database session is lost while its process lives (an idle
// timeout, a proxy, pg_terminate_backend): its transaction rolls back with
// the key's lock and the write it made, a duplicate parked on the other
// instance runs on a clean slate, and the owner's answer is withheld. The
// design that held the lock on one session and wrote on another ran the
// handler twice and kept both writes.
func TestSharedKeyOwnerSessionLost(t *testing.T) {
	dsn := pgtest.DSN(t)
	appA, appB := "porch_lost_a", "porch_lost_b"
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := holdFirstRun(entered, release)
	a := newPGInstance(t, pgtest.WithParam(dsn, "application_name", appA), h)
	b := newPGInstance(t, pgtest.WithParam(dsn, "application_name", appB), h)
	ctx := context.Background()
	if _, err := b.st.Pool().Exec(ctx, `CREATE TABLE ledger (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)

	owner := make(chan int, 1)
	go func() { s, _ := a.post(t, "order-3", `{"amount":9}`); owner <- s }()
	<-entered // a owns the key and has written its ledger row in its transaction
	dup := make(chan int, 1)
	go func() { s, _ := b.post(t, "order-3", `{"amount":9}`); dup <- s }()
	waitAdvisory(t, b.st, appB, false)

	// Terminate only the session that holds the key: a's process lives on.
	var killed int
	if err := b.st.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		JOIN pg_stat_activity s USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND s.application_name = $1`, appA).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the owner's session: killed %d, err %v; want 1", killed, err)
	}
	select {
	case s := <-dup:
		if s != http.StatusCreated {
			t.Fatalf("b's duplicate: got %d, want 201 from running on a clean slate", s)
		}
	case <-time.After(waitLimit):
		t.Fatal("b's duplicate still parked after the owner's session was lost")
	}
	free()
	if s := <-owner; s < 500 {
		t.Fatalf("a's owner, whose transaction was lost: got %d, want a 5xx (its answer withheld)", s)
	}
	var rows int
	if err := b.st.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("ledger rows: got %d, want exactly 1 (the lost owner's write rolled back)", rows)
	}
	if s, body := a.post(t, "order-3", `{"amount":9}`); s != http.StatusCreated || body != "run 2" {
		t.Fatalf("retry on a: got %d %q, want b's stored 201 \"run 2\"", s, body)
	}
}

// waitAdvisory polls until an instance's backend holds (granted) or waits
// for (not granted) an advisory lock. The server's lock table can only be
// polled.
func waitAdvisory(t *testing.T, st *postgres.Store, app string, granted bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		var n int
		if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid)
			WHERE l.locktype = 'advisory' AND l.granted = $2 AND s.application_name = $1`, app, granted).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no advisory lock with granted=%v within %s", app, granted, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newPGMiddleware is one instance's middleware on dsn with opt and sopt,
// behind its own server, closed on cleanup.
func newPGMiddleware(t *testing.T, dsn string, opt idem.Options, sopt postgres.Options, h http.Handler) *pgInstance {
	t.Helper()
	st := pgstore.Open(t, dsn, sopt) // closed after the pool and the server, which close first
	pool := porch.NewPool(porch.PoolOptions{})
	in := &pgInstance{st: st, srv: httptest.NewServer(idem.New(pool, st, opt).Handler(h))}
	t.Cleanup(func() {
		in.srv.Close()
		pool.Close(context.Background())
	})
	return in
}

// A stored response's TTL runs from its save, not from the owner's BEGIN:
// measured from the transaction's start (now()), a handler that worked
// longer than the TTL stored a row already expired, and the retry ran the
// handler again.
func TestPostgresTTLRunsFromSave(t *testing.T) {
	h := &payHandler{}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.runs.Load() == 0 {
			time.Sleep(1500 * time.Millisecond) // the handler's work, longer than the TTL
		}
		h.ServeHTTP(w, r)
	})
	in := newPGMiddleware(t, pgtest.DSN(t), idem.Options{RequireKey: true, TTL: time.Second}, postgres.Options{}, slow)
	s1, b1 := in.post(t, "ttl", `{"amount":1}`)
	s2, b2 := in.post(t, "ttl", `{"amount":1}`)
	if s1 != http.StatusCreated || s2 != http.StatusCreated || b1 != b2 || h.runs.Load() != 1 {
		t.Fatalf("retry right after a slow first run: got %d %s then %d %s, %d runs; want one run and its replay", s1, b1, s2, b2, h.runs.Load())
	}
}

// A server or DSN whose default isolation is SERIALIZABLE must not let the
// second instance's leader miss the stored row: its snapshot would be
// taken before its lock wait, and it ran the handler again.
func TestPostgresSerializableDefault(t *testing.T) {
	dsn := pgtest.WithParam(pgtest.DSN(t), "default_transaction_isolation", "serializable")
	h := &payHandler{entered: make(chan struct{}, 2), release: make(chan struct{})}
	a := newPGMiddleware(t, pgtest.WithParam(dsn, "application_name", "porch_ser_a"), idem.Options{}, postgres.Options{}, h)
	b := newPGMiddleware(t, pgtest.WithParam(dsn, "application_name", "porch_ser_b"), idem.Options{}, postgres.Options{}, h)
	var once sync.Once
	free := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(free)
	first := make(chan int, 1)
	go func() { s, _ := a.post(t, "ser", `{"amount":2}`); first <- s }()
	<-h.entered
	second := make(chan int, 1)
	go func() { s, _ := b.post(t, "ser", `{"amount":2}`); second <- s }()
	waitAdvisory(t, b.st, "porch_ser_b", false)
	free()
	if s1, s2 := <-first, <-second; s1 != http.StatusCreated || s2 != http.StatusCreated {
		t.Fatalf("got %d and %d, want 201 and its replay", s1, s2)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler runs: got %d, want 1", n)
	}
}

// The duplicate that inherits a key from an owner that answered 5xx needs
// the owner's key connection: the owner gives it back before the flight
// ends. Given back after, the heir found none free and got 503 (19 rounds
// of 20 with KeyConns 1).
func TestPostgresHeirGetsTheKeyConnection(t *testing.T) {
	var runs atomic.Int64
	entered, release := make(chan struct{}, 1), make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1)%2 == 1 { // every key's first run fails, after its duplicate parked
			entered <- struct{}{}
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	in := newPGMiddleware(t, pgtest.DSN(t), idem.Options{}, postgres.Options{KeyConns: 1}, h)
	for i := range 10 {
		key := fmt.Sprintf("heir-%d", i)
		owner := make(chan int, 1)
		go func() { s, _ := in.post(t, key, "x"); owner <- s }()
		<-entered
		heir := make(chan int, 1)
		go func() { s, _ := in.post(t, key, "x"); heir <- s }()
		testkit.WaitStacks(t, parkedFrame, 1, waitLimit)
		release <- struct{}{}
		if s := <-owner; s != http.StatusServiceUnavailable {
			t.Fatalf("round %d: owner got %d, want its handler's 503", i, s)
		}
		if s := <-heir; s != http.StatusCreated {
			t.Fatalf("round %d: the heir got %d, want 201 from running the handler itself", i, s)
		}
	}
}
