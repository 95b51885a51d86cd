package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// txBackend is one store with an application table, ledger, in the same
// database as porch's tables, and a way to break the response's save.
type txBackend struct {
	st    driver.KeyStore
	exec  func(t *testing.T, query string) // runs DDL outside any request
	count func(t *testing.T) int           // rows in ledger
	// breakSave makes every INSERT into porch_idem_responses fail; heal
	// undoes it.
	breakSave, heal string
}

// eachBackend runs test on SQLite and on PostgreSQL (skipped without a
// server, unless PORCH_REQUIRE_POSTGRES is set).
func eachBackend(t *testing.T, test func(t *testing.T, b txBackend)) {
	t.Run("sqlite", func(t *testing.T) {
		st := openStore(t, store.Options{})
		db := st.DB()
		b := txBackend{st: st,
			exec: func(t *testing.T, q string) {
				t.Helper()
				if _, err := db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			},
			count: func(t *testing.T) int {
				t.Helper()
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM ledger`).Scan(&n); err != nil {
					t.Fatalf("count ledger: %v", err)
				}
				return n
			},
			breakSave: `CREATE TRIGGER boom BEFORE INSERT ON porch_idem_responses BEGIN SELECT RAISE(ABORT, 'boom'); END`,
			heal:      `DROP TRIGGER boom`,
		}
		b.exec(t, `CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY, note TEXT)`)
		test(t, b)
	})
	t.Run("postgres", func(t *testing.T) {
		st := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
		ctx := context.Background()
		b := txBackend{st: st,
			exec: func(t *testing.T, q string) {
				t.Helper()
				if _, err := st.Pool().Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			},
			count: func(t *testing.T) int {
				t.Helper()
				var n int
				if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
					t.Fatalf("count ledger: %v", err)
				}
				return n
			},
			breakSave: `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
				CREATE TRIGGER boom BEFORE INSERT ON porch_idem_responses FOR EACH ROW EXECUTE FUNCTION boom()`,
			heal: `DROP TRIGGER boom ON porch_idem_responses; DROP FUNCTION boom()`,
		}
		b.exec(t, `CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY, note TEXT)`)
		test(t, b)
	})
}

// ledgerHandler writes one ledger row per execution through idem.Exec, with
// the execution's number as its id, then answers status.
type ledgerHandler struct {
	runs   atomic.Int64
	status atomic.Int64 // 0 means 201
	id     func(n int64) string
}

func (h *ledgerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	id := fmt.Sprint(n)
	if h.id != nil {
		id = h.id(n)
	}
	if err := idem.Exec(r.Context(), `INSERT INTO ledger (id, note) VALUES ($1, $2)`, id, "run"); err != nil {
		// A handler that ignores the error and answers success anyway
		// must not have that answer stored: the middleware withholds it.
		w.Header().Set("X-Exec-Error", err.Error())
	}
	status := int(h.status.Load())
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, "run %d", n)
}

func send(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	req.Header.Set(idem.Header, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The handler's write commits with its stored response: one row, and a
// retry replays without writing again.
func TestExecCommitsWithResponse(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		mh := m.Handler(h)
		first := send(mh, "k", "a")
		if first.Code != http.StatusCreated {
			t.Fatalf("first: got %d %s, want 201", first.Code, first.Body)
		}
		again := send(mh, "k", "a")
		if again.Code != http.StatusCreated || again.Body.String() != first.Body.String() {
			t.Fatalf("retry: got %d %q, want the stored 201 %q", again.Code, again.Body, first.Body)
		}
		if got := b.count(t); got != 1 || h.runs.Load() != 1 {
			t.Fatalf("ledger rows %d, runs %d: want 1 and 1", got, h.runs.Load())
		}
	})
}

// A failed save of the response rolls the handler's write back with it: the
// design that committed the write first left a row with no stored response,
// and the retry wrote a second one.
func TestExecRolledBackWhenSaveFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		mh := m.Handler(h)
		b.exec(t, b.breakSave)
		if got := send(mh, "k", "a"); got.Code != http.StatusServiceUnavailable {
			t.Fatalf("save broken: got %d %s, want 503", got.Code, got.Body)
		}
		if got := b.count(t); got != 0 {
			t.Fatalf("ledger rows after a failed save: got %d, want 0", got)
		}
		b.exec(t, b.heal)
		if got := send(mh, "k", "a"); got.Code != http.StatusCreated {
			t.Fatalf("retry after healing: got %d %s, want 201", got.Code, got.Body)
		}
		if got := b.count(t); got != 1 {
			t.Fatalf("ledger rows after the retry: got %d, want exactly 1", got)
		}
	})
}

// A write that fails on its own terms (here a duplicate primary key) fails
// the request with a 500 problem whatever the handler answered, stores
// nothing, and lets the next retry run on a clean slate.
func TestExecFailedWriteWithholdsAnswer(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		b.exec(t, `INSERT INTO ledger (id, note) VALUES ('taken', 'before')`)
		h := &ledgerHandler{id: func(n int64) string {
			if n == 1 {
				return "taken"
			}
			return fmt.Sprint(n)
		}}
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		mh := m.Handler(h)
		got := send(mh, "k", "a")
		if got.Code != http.StatusInternalServerError || !strings.Contains(got.Body.String(), idem.ProblemWriteFailed) {
			t.Fatalf("failed write: got %d %s, want 500 %s", got.Code, got.Body, idem.ProblemWriteFailed)
		}
		if n := b.count(t); n != 1 {
			t.Fatalf("ledger rows after the failed write: got %d, want the 1 from before", n)
		}
		if got := send(mh, "k", "a"); got.Code != http.StatusCreated || got.Body.String() != "run 2" {
			t.Fatalf("retry: got %d %q, want 201 \"run 2\" (the failed run stored nothing)", got.Code, got.Body)
		}
		if n := b.count(t); n != 2 {
			t.Fatalf("ledger rows after the retry: got %d, want 2", n)
		}
	})
}

// A 5xx answer is not stored, so its writes must not be either: the retry
// runs the handler again, and a committed write would be a second one.
func TestExec5xxDiscardsWrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		h.status.Store(http.StatusBadGateway)
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		mh := m.Handler(h)
		if got := send(mh, "k", "a"); got.Code != http.StatusBadGateway {
			t.Fatalf("first: got %d, want the handler's 502", got.Code)
		}
		if n := b.count(t); n != 0 {
			t.Fatalf("ledger rows after a 5xx: got %d, want 0", n)
		}
		h.status.Store(0)
		if got := send(mh, "k", "a"); got.Code != http.StatusCreated {
			t.Fatalf("retry: got %d, want 201", got.Code)
		}
		if n := b.count(t); n != 1 {
			t.Fatalf("ledger rows after the retry: got %d, want 1", n)
		}
	})
}

// Exec outside a keyed request refuses rather than writing outside the
// transaction that would make it exactly-once.
func TestExecWithoutKey(t *testing.T) {
	if err := idem.Exec(context.Background(), `INSERT INTO ledger (id) VALUES ('x')`); !errors.Is(err, idem.ErrNoOwner) {
		t.Fatalf("Exec without a key: got %v, want ErrNoOwner", err)
	}
	if id, ok := idem.OperationID(context.Background()); ok || id != "" {
		t.Fatalf("OperationID without a key: got %q, %v; want \"\", false", id, ok)
	}
}

// OperationID is the same for every run of one key (a downstream service
// sees one operation) and differs between keys and between principals.
func TestOperationID(t *testing.T) {
	var ids []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := idem.OperationID(r.Context())
		if !ok {
			t.Errorf("OperationID in the owner's handler: not ok")
		}
		ids = append(ids, id)
		w.WriteHeader(http.StatusServiceUnavailable) // not stored: the next retry runs again
	})
	m := idem.New(newPool(t, porchOptions()), openStore(t, store.Options{}),
		idem.Options{Principal: porch.KeyByHeader("X-User")})
	mh := m.Handler(h)
	for _, c := range []struct{ key, user string }{{"k", "ann"}, {"k", "ann"}, {"other", "ann"}, {"k", "bob"}} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("a"))
		req.Header.Set(idem.Header, c.key)
		req.Header.Set("X-User", c.user)
		mh.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(ids) != 4 || ids[0] != ids[1] || ids[0] == ids[2] || ids[0] == ids[3] || ids[2] == ids[3] {
		t.Fatalf("operation ids %q: want runs of one key equal, other keys and principals different", ids)
	}
}

// Two middlewares on one store (two routes, two listeners) are two sets of
// actors: the store's reservation must still admit one owner per key, or
// both run the handler and the second answer overwrites the first.
func TestTwoMiddlewaresOneStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		entered, release := make(chan struct{}, 1), make(chan struct{})
		h := holdFirstRun(entered, release)
		public := idem.New(newPool(t, porchOptions()), b.st, idem.Options{}).Handler(h)
		internal := idem.New(newPool(t, porchOptions()), b.st, idem.Options{}).Handler(h)
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- send(public, "k", "a") }()
		<-entered
		second := make(chan *httptest.ResponseRecorder, 1)
		go func() { second <- send(internal, "k", "a") }()
		waitInStack(t, "porch/store/sqlite.(*Store).Reserve(", "porch/store/postgres.(*Store).Reserve(")
		close(release)
		a, c := <-first, <-second
		if a.Code != http.StatusCreated || c.Code != http.StatusCreated || a.Body.String() != c.Body.String() {
			t.Fatalf("through two middlewares: got %d %q and %d %q, want one 201 and its replay", a.Code, a.Body, c.Code, c.Body)
		}
		if n := b.count(t); n != 1 || h.runs.Load() != 1 {
			t.Fatalf("ledger rows %d, runs %d: want 1 and 1", n, h.runs.Load())
		}
	})
}

// A middleware nested inside another on the same store, for the same key,
// passes the request through: the outer one owns the key and stores the
// response. Leading it again waited on the outer reservation forever.
func TestNestedMiddlewaresSameKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		outer := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		inner := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		mh := outer.Handler(inner.Handler(h))
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- send(mh, "k", "a") }()
		select {
		case got := <-done:
			if got.Code != http.StatusCreated {
				t.Fatalf("nested: got %d %s, want 201", got.Code, got.Body)
			}
		case <-time.After(waitLimit):
			t.Fatal("nested middlewares on one key never answered: the inner one waits on the outer's reservation")
		}
		if again := send(mh, "k", "a"); again.Code != http.StatusCreated || h.runs.Load() != 1 || b.count(t) != 1 {
			t.Fatalf("retry: got %d, runs %d, rows %d; want a 201 replay, 1 run, 1 row", again.Code, h.runs.Load(), b.count(t))
		}
	})
}

// waitInStack polls the goroutine dump until one of frames shows: a request
// blocked where the test needs it, which nothing else can signal.
func waitInStack(t *testing.T, frames ...string) {
	t.Helper()
	testkit.WaitStack(t, waitLimit, fmt.Sprintf("a goroutine in any of %q", frames), func(g string) bool {
		for _, f := range frames {
			if strings.Contains(g, f) {
				return true
			}
		}
		return false
	})
}

// heldRuns writes one ledger row per run through idem.Exec, numbered by run,
// and answers 201 "run N"; its first run signals entered, then waits for
// release, so a test can act while an owner is inside its handler.
type heldRuns struct {
	runs             atomic.Int64
	entered, release chan struct{}
}

func holdFirstRun(entered, release chan struct{}) *heldRuns {
	return &heldRuns{entered: entered, release: release}
}

func (h *heldRuns) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	if err := idem.Exec(r.Context(), `INSERT INTO ledger (id) VALUES ($1)`, fmt.Sprint(n)); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if n == 1 {
		h.entered <- struct{}{}
		<-h.release
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "run %d", n)
}

// One Keys mounted twice, or a third layer behind a middleware with
// another scope, must still pass a request through to the owner further
// out: the inner After saved and finished the outer's flight (the client
// got 503 for a stored answer, or a retry replayed a 201 the client never
// got), and a third layer waited on the outermost reservation.
func TestNestedMiddlewaresPassThrough(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{})
		other := idem.New(newPool(t, porchOptions()), b.st,
			idem.Options{Principal: func(*http.Request) (string, error) { return "someone else", nil }})
		tests := []struct {
			name string
			mh   http.Handler
		}{
			{"the same Keys twice", m.Handler(m.Handler(h))},
			{"three layers", m.Handler(other.Handler(m.Handler(h)))},
		}
		for i, tc := range tests {
			key := fmt.Sprint("k", i)
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- send(tc.mh, key, "a") }()
			var got *httptest.ResponseRecorder
			select {
			case got = <-done:
			case <-time.After(waitLimit):
				t.Fatalf("%s: no answer: an inner layer waits on the outer reservation", tc.name)
			}
			if got.Code != http.StatusCreated {
				t.Fatalf("%s: got %d %s, want 201", tc.name, got.Code, got.Body)
			}
			if again := send(tc.mh, key, "a"); again.Code != http.StatusCreated || again.Body.String() != got.Body.String() {
				t.Fatalf("%s: retry got %d %q, want the stored %q", tc.name, again.Code, again.Body, got.Body)
			}
		}
		if n := b.count(t); n != int(h.runs.Load()) || n != 2 {
			t.Fatalf("ledger rows %d, runs %d: want 2 and 2 (one per key)", n, h.runs.Load())
		}
	})
}

// execHandler runs its one query through idem.Exec and answers 201.
func execHandler(query string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := idem.Exec(r.Context(), query); err != nil {
			w.Header().Set("X-Exec-Error", err.Error())
		}
		w.WriteHeader(http.StatusCreated)
	})
}

// On SQLite an owner's statement shares the committer's connection with
// every other request, so one that outlives itself there (a temporary or
// permanent trigger, any schema change) or writes porch's own tables is
// refused: its request is 500 …/idempotency-write-failed with nothing
// stored, and a later request's insert fires nothing. Before, CREATE TEMP
// TRIGGER was accepted and fired on every later insert into ledger.
func TestExecRefusesWhatOutlivesTheStatement(t *testing.T) {
	tests := []struct{ name, query string }{
		{"TEMP TRIGGER", `CREATE TEMP TRIGGER spy AFTER INSERT ON ledger BEGIN INSERT INTO spied (id) VALUES (new.id); END`},
		{"TEMP TABLE", `CREATE TEMP TABLE scratch (x)`},
		{"TEMP VIEW", `CREATE TEMP VIEW peek AS SELECT id FROM ledger`},
		{"TRIGGER on a main table", `CREATE TRIGGER spy AFTER INSERT ON ledger BEGIN INSERT INTO spied (id) VALUES (new.id); END`},
		{"INSERT into porch_idem_responses", `INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
			VALUES ('forged', x'01', 200, 'text/plain', x'', 0, 9223372036854775807)`},
		{"INSERT into porch_rate_journal", `INSERT INTO porch_rate_journal (key, window_start, window_ms, count, expires_at)
			VALUES ('k', 0, 1000, 0, 9223372036854775807)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, store.Options{})
			db := st.DB()
			for _, q := range []string{`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY, note TEXT)`, `CREATE TABLE spied (id TEXT)`} {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			m := idem.New(newPool(t, porchOptions()), st, idem.Options{})
			got := send(m.Handler(execHandler(tc.query)), "evil", "a")
			if got.Code != http.StatusInternalServerError || !strings.Contains(got.Body.String(), idem.ProblemWriteFailed) {
				t.Fatalf("refused statement: got %d %s, want 500 %s", got.Code, got.Body, idem.ProblemWriteFailed)
			}
			if later := send(m.Handler(&ledgerHandler{}), "later", "a"); later.Code != http.StatusCreated {
				t.Fatalf("a later request: got %d %s, want 201", later.Code, later.Body)
			}
			var stored, journal, spied, objects int
			for _, c := range []struct {
				q   string
				dst *int
			}{
				{`SELECT count(*) FROM porch_idem_responses`, &stored}, // the later request's alone
				{`SELECT count(*) FROM porch_rate_journal`, &journal},
				{`SELECT count(*) FROM spied`, &spied},
				{`SELECT count(*) FROM sqlite_master WHERE name IN ('spy', 'scratch', 'peek')`, &objects},
			} {
				if err := db.QueryRow(c.q).Scan(c.dst); err != nil {
					t.Fatalf("%s: %v", c.q, err)
				}
			}
			if stored != 1 || journal != 0 || spied != 0 || objects != 0 {
				t.Fatalf("after the refused statement: %d responses stored, %d journal rows, %d inserts spied on, %d objects left; want 1, 0, 0, 0",
					stored, journal, spied, objects)
			}
		})
	}
}
