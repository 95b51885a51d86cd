package postgres_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// addHit counts one hit and waits for it to be durable.
func addHit(t *testing.T, s *postgres.Store, key string, window time.Duration) hitResult {
	t.Helper()
	type res struct {
		h   driver.Hit
		err error
	}
	ch := make(chan res, 1)
	if err := s.AddHit(key, unlimited(window), 1, driver.Lease{}, func(h driver.Hit, err error) { ch <- res{h, err} }); err != nil {
		t.Fatalf("AddHit: %v", err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatalf("AddHit done: %v", r.err)
	}
	return hitResult{Count: r.h.State.Count, WindowStart: r.h.State.Start,
		ResetIn: r.h.State.Start.Add(window).Sub(r.h.Now)}
}

// hitResult is what a test reads of a counted hit.
type hitResult struct {
	Count       int64
	ResetIn     time.Duration // time left in the window
	WindowStart time.Time
}

// unlimited is a fixed-window rule whose limit no test reaches.
func unlimited(window time.Duration) driver.Rule {
	return algorithm.MustRule(algorithm.Fixed, 1<<40, window, 0)
}

// Two stores on one database stand for two instances: every hit must get a
// distinct position, so no increment is lost and no two requests are both
// the N-th.
func TestPostgresAddHitIsExactAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := pgstore.Open(t, dsn, postgres.Options{}), pgstore.Open(t, dsn, postgres.Options{})
	const perInstance = 200
	var (
		mu        sync.Mutex
		positions []int64
		wg        sync.WaitGroup
		start     = make(chan struct{})
	)
	for _, s := range []*postgres.Store{a, b} {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := s.AddHit("rate:k", unlimited(time.Hour), 1, driver.Lease{}, func(h driver.Hit, err error) {
					if err != nil {
						t.Errorf("AddHit: %v", err)
						return
					}
					mu.Lock()
					positions = append(positions, h.State.Count)
					mu.Unlock()
				})

				if err != nil {
					t.Errorf("AddHit: %v", err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	// Close flushes; the callbacks have all run once both are closed.
	for _, s := range []*postgres.Store{a, b} {
		if err := s.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	slices.Sort(positions)
	if len(positions) != 2*perInstance {
		t.Fatalf("got %d answers, want %d", len(positions), 2*perInstance)
	}
	for i, p := range positions {
		if p != int64(i+1) {
			t.Fatalf("positions[%d] = %d, want %d (positions must be 1..N, each once)", i, p, i+1)
		}
	}
	if st := a.Stats(); st.Commits >= st.Writes {
		t.Logf("instance a: %d commits for %d hits (no batching happened this run)", st.Commits, st.Writes)
	}
}

func TestPostgresWindowResetsOnAccess(t *testing.T) {
	s := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	const window = 300 * time.Millisecond
	for want := int64(1); want <= 3; want++ {
		if got := addHit(t, s, "rate:w", window).Count; got != want {
			t.Fatalf("hit %d: Count = %d", want, got)
		}
	}
	h := addHit(t, s, "rate:w", window)
	// Wait for the window to pass on the database's clock; the hit reports
	// how long is left.
	time.Sleep(h.ResetIn + 10*time.Millisecond)
	if got := addHit(t, s, "rate:w", window).Count; got != 1 {
		t.Fatalf("after the window: Count = %d, want 1 (window reset on access)", got)
	}
}

func TestPostgresReserveExcludesOtherInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := pgstore.Open(t, dsn, postgres.Options{}), pgstore.Open(t, dsn, postgres.Options{})
	ctx := context.Background()
	held, err := a.Reserve(ctx, "idem:k")
	if err != nil {
		t.Fatalf("Reserve a: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Reserve(short, "idem:k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve b while a holds: err = %v, want context.DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := b.Reserve(ctx, "idem:k")
		if err == nil {
			r.Release()
		}
		got <- err
	}()
	want := driver.Response{Digest: []byte("d"), Status: 201, ContentType: "application/json", Body: []byte(`{"ok":true}`),
		Header: http.Header{"Location": {"/orders/1"}, "X-Latin1": {"caf\xe9"}}}
	if err := held.Save(ctx, want, time.Hour); err != nil {
		t.Fatalf("Save: %v", err)
	}
	held.Release()
	if err := <-got; err != nil {
		t.Fatalf("Reserve b after release: %v", err)
	}
	r, err := b.Reserve(ctx, "idem:k")
	if err != nil {
		t.Fatalf("Reserve b: %v", err)
	}
	defer r.Release()
	res, ok, err := r.Load(ctx)
	if err != nil || !ok {
		t.Fatalf("Load = ok %v, err %v; want the stored response", ok, err)
	}
	if res.Status != want.Status || string(res.Body) != string(want.Body) || res.ContentType != want.ContentType {
		t.Fatalf("Load = %d %q %q, want %d %q %q", res.Status, res.ContentType, res.Body, want.Status, want.ContentType, want.Body)
	}
	if !reflect.DeepEqual(res.Header, want.Header) {
		t.Errorf("Load: got header %q, want %q", res.Header, want.Header)
	}
}

// A holder whose connection dies (its process crashed) must not wedge the
// key: the server drops the advisory lock with the connection.
func TestPostgresReservationDiesWithItsConnection(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := pgstore.Open(t, pgtest.WithParam(dsn, "application_name", "porch_dies_a"), postgres.Options{}), pgstore.Open(t, dsn, postgres.Options{})
	ctx := context.Background()
	dead, err := a.Reserve(ctx, "idem:crash")
	if err != nil {
		t.Fatalf("Reserve a: %v", err)
	}
	defer dead.Release() // returns the dead connection, so a's Close does not wait for it
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Kill the backend that holds the lock, as the server does when the
	// client's process dies.
	tag, err := conn.Exec(ctx, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity s USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND s.application_name = 'porch_dies_a'`)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("terminate holder: rows %d, err %v", tag.RowsAffected(), err)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := b.Reserve(wait, "idem:crash")
	if err != nil {
		t.Fatalf("Reserve b after the holder died: %v", err)
	}
	r.Release()
}

// An expired response loads as absent, and the owner that then saves
// replaces it: one row, the new one. (The prune on Load is part of the
// owner's transaction, so an owner that gives the key up instead leaves the
// expired row to the bounded prune.)
func TestPostgresExpiredResponseIsReplaced(t *testing.T) {
	s := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	ctx := context.Background()
	r, err := s.Reserve(ctx, "idem:ttl")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte("old"), Status: 200, Body: []byte("x")}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err = s.Reserve(ctx, "idem:ttl")
		if err != nil {
			t.Fatal(err)
		}
		_, ok, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		r.Release()
		if time.Now().After(deadline) {
			t.Fatal("a response saved with a 1ms TTL still loads after 5s")
		}
		time.Sleep(5 * time.Millisecond) // real time must pass on the database's clock
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte("new"), Status: 201, Body: []byte("y")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var n int
	var digest string
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), string_agg(convert_from(digest, 'UTF8'), ',') FROM porch_idem_responses
		WHERE key = 'idem:ttl'`).Scan(&n, &digest); err != nil {
		t.Fatal(err)
	}
	if n != 1 || digest != "new" {
		t.Fatalf("rows for the key after the replacing save: got %d (%s), want 1 (new)", n, digest)
	}
}

// Holding keys never waits for a connection: beyond KeyConns a reservation
// fails at once, so in-flight keys cannot starve each other or the
// application's queries, and the caller answers 503.
func TestPostgresReserveFailsFastBeyondKeyConns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{KeyConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	a, err := s.Reserve(ctx, "idem:1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Reserve(ctx, "idem:2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, "idem:3"); !errors.Is(err, driver.ErrNoKeyConn) {
		t.Fatalf("third Reserve with KeyConns 2: err = %v, want ErrNoKeyConn", err)
	}
	var one int
	if err := s.Pool().QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("application query while every key connection is held: %v", err)
	}
	a.Release()
	c, err := s.Reserve(ctx, "idem:3")
	if err != nil {
		t.Fatalf("Reserve after a release: %v", err)
	}
	b.Release()
	c.Release()
}

// Close keeps to its context while an owner still holds a key connection:
// pgxpool.Close waits for every acquired connection, and an owner holds one
// for its handler's whole run, so a stop waited as long as the slowest
// handler (forever, for one that never returns).
func TestPostgresCloseKeepsItsDeadline(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := s.Reserve(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(cctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with a key held: got %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close ignored its deadline while a key connection was held")
	}
}

// A reservation that gives up waiting for another instance's owner (its
// context ended: MaxWait, or the client left) must stop waiting on the
// server too, or the backend stays queued on the advisory lock, takes it
// when the owner finishes and holds a connection slot nobody counts (a
// killed client's backend does exactly that). Reserve discards the
// connection, and pgx's close ends the backend within milliseconds; this
// guards that.
func TestPostgresAbandonedReserveLeavesNoWaiter(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := pgstore.Open(t, pgtest.WithParam(dsn, "application_name", "porch_abandon_a"), postgres.Options{})
	b := pgstore.Open(t, pgtest.WithParam(dsn, "application_name", "porch_abandon_b"), postgres.Options{})
	ctx := context.Background()
	hold, err := a.Reserve(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Reserve(wctx, "busy"); err == nil {
		t.Fatal("b reserved a key a holds")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var waiting int
		if err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid)
			WHERE l.locktype = 'advisory' AND NOT l.granted AND s.application_name = 'porch_abandon_b'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's backend still waits on the key's lock %s after b gave up", 5*time.Second)
		}
		time.Sleep(20 * time.Millisecond) // the server's lock table can only be polled
	}
}

// A constraint checked at COMMIT fails the owner's Save with
// store.ErrWriteFailed, though COMMIT is pipelined with the response's
// write: nothing of the owner's is stored, and the key is free again.
func TestPostgresDeferredViolationFailsSave(t *testing.T) {
	s := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	ctx := context.Background()
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY,
		parent int REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	const key = "idem:deferred"
	hold, err := s.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, ok, err := hold.Load(ctx); err != nil || ok {
		t.Fatalf("Load: ok %v, err %v; want a miss", ok, err)
	}
	if err := hold.Exec(ctx, `INSERT INTO orders (id, parent) VALUES (1, 2)`); err != nil {
		t.Fatalf("Exec: %v (the reference is only checked at COMMIT)", err)
	}
	err = hold.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour)
	if !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("Save: got %v, want store.ErrWriteFailed", err)
	}
	var orders int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 0 {
		t.Errorf("orders: got %d rows, want 0 (the owner's write rolled back)", orders)
	}
	next, err := s.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve after the failed Save: %v", err)
	}
	defer next.Release()
	if _, ok, err := next.Load(ctx); err != nil || ok {
		t.Errorf("Load after the failed Save: ok %v, err %v; want a miss", ok, err)
	}
}

// Inspect and Forget on one instance refuse a key another instance's owner
// holds, without waiting for it (store.ErrKeyHeld), and Forget's deletion
// is committed once it returns: the other instance's Reserve finds no row.
func TestPostgresInspectAndForgetAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := pgstore.Open(t, dsn, postgres.Options{}), pgstore.Open(t, dsn, postgres.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hold, err := a.Reserve(ctx, "k")
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if _, _, err := b.Inspect(ctx, "k"); !errors.Is(err, store.ErrKeyHeld) {
		t.Errorf("inspect a key held elsewhere: got %v, want ErrKeyHeld", err)
	}
	if err := b.Forget(ctx, "k"); !errors.Is(err, store.ErrKeyHeld) {
		t.Errorf("forget a key held elsewhere: got %v, want ErrKeyHeld", err)
	}
	if err := hold.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("ok")}, time.Hour); err != nil {
		t.Fatalf("save: %v", err)
	}
	res, ok, err := b.Inspect(ctx, "k")
	if err != nil || !ok || res.Status != 201 || string(res.Body) != "ok" {
		t.Fatalf("inspect: got %+v %v %v, want the stored 201", res, ok, err)
	}
	if err := b.Forget(ctx, "k"); err != nil {
		t.Fatalf("forget: %v", err)
	}
	hold, err = a.Reserve(ctx, "k")
	if err != nil {
		t.Fatalf("reserve after forget: %v", err)
	}
	defer hold.Release()
	if _, ok, err := hold.Load(ctx); ok || err != nil {
		t.Errorf("load after forget: got %v %v, want nothing", ok, err)
	}
}
