package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// These tests attack the pipelined paths (Reserve's BEGIN with the lock,
// Save's write with COMMIT, a batch's two pipelines): whatever fails, no
// pooled connection may go back to its pool inside a transaction, and a
// failure must never be reported as a commit.

func openInternal(t *testing.T, dsn string, opt Options) *Store {
	t.Helper()
	p, err := Open(context.Background(), dsn, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// poolIsClean checks every idle connection of pl: outside a transaction on
// the server's word (TxStatus comes from its ReadyForQuery) and holding no
// advisory lock.
func poolIsClean(t *testing.T, name string, pl *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, c := range pl.AcquireAllIdle(ctx) {
		var locks int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'`).Scan(&locks)
		if err != nil {
			t.Errorf("%s: query on an idle connection: %v", name, err)
		} else if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("%s: an idle pooled connection is inside a transaction (status %q)", name, st)
		} else if locks != 0 {
			t.Errorf("%s: an idle pooled connection holds %d advisory locks", name, locks)
		}
		c.Release()
	}
}

func count(t *testing.T, p *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := p.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func mustExec(t *testing.T, p *Store, q string) {
	t.Helper()
	if _, err := p.pool.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// The save statement itself failing skips COMMIT in its pipeline: the
// owner's write is rolled back, the error is reported, and the connection
// does not go back to the pool inside the aborted transaction.
func TestSaveStatementFails(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{KeyConns: 1})
	ctx := context.Background()
	mustExec(t, p, `CREATE TABLE effects (id int)`)
	mustExec(t, p, `ALTER TABLE porch_idem_responses ADD CONSTRAINT st CHECK (status < 600)`)
	r, err := p.Reserve(ctx, "idem:a")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.Load(ctx); err != nil || ok {
		t.Fatalf("Load: %v %v", ok, err)
	}
	if err := r.Exec(ctx, `INSERT INTO effects VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 999, Body: []byte("x")}, time.Hour); err == nil {
		t.Fatal("Save of a response the table refuses: got nil")
	}
	if n := count(t, p, `SELECT count(*) FROM effects`); n != 0 {
		t.Fatalf("effects after a failed Save: %d, want 0", n)
	}
	poolIsClean(t, "keys", p.keys)
	r, err = p.Reserve(ctx, "idem:a")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Exec(ctx, `INSERT INTO effects VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("effects: %d, want 1", n)
	}
	poolIsClean(t, "keys", p.keys)
}

// The prune after COMMIT failing must not turn a committed Save into a
// reported failure (nor leave the connection in a transaction).
func TestPruneAfterCommitFails(t *testing.T) {
	for _, mode := range []string{"", "simple_protocol", "exec", "describe_exec", "cache_describe"} {
		t.Run("mode="+mode, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			if mode != "" {
				dsn = pgtest.WithParam(dsn, "default_query_exec_mode", mode)
			}
			p := openInternal(t, dsn, Options{KeyConns: 1})
			ctx := context.Background()
			mustExec(t, p, `CREATE TABLE effects (id int)`)
			mustExec(t, p, `INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at, headers)
				VALUES ('idem:old', '', 200, '', '', 0, 1, '')`)
			mustExec(t, p, `CREATE FUNCTION no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'no delete'; END $$`)
			mustExec(t, p, `CREATE TRIGGER no_delete BEFORE DELETE ON porch_idem_responses FOR EACH ROW EXECUTE FUNCTION no_delete()`)
			r, err := p.Reserve(ctx, "idem:b")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Exec(ctx, `INSERT INTO effects VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour); err != nil {
				t.Fatalf("Save whose prune failed after COMMIT: %v", err)
			}
			if n := count(t, p, `SELECT count(*) FROM effects`); n != 1 {
				t.Fatalf("effects: %d, want 1", n)
			}
			if n := count(t, p, `SELECT count(*) FROM porch_idem_responses WHERE key = 'idem:b'`); n != 1 {
				t.Fatalf("stored: %d, want 1", n)
			}
			poolIsClean(t, "keys", p.keys)
			// And a failure of the save statement in this mode.
			mustExec(t, p, `ALTER TABLE porch_idem_responses ADD CONSTRAINT st CHECK (status < 600)`)
			r, err = p.Reserve(ctx, "idem:c")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Exec(ctx, `INSERT INTO effects VALUES (2)`); err != nil {
				t.Fatal(err)
			}
			if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 999, Body: []byte("x")}, time.Hour); err == nil {
				t.Fatal("Save of a refused response: nil")
			}
			if n := count(t, p, `SELECT count(*) FROM effects`); n != 1 {
				t.Fatalf("effects: %d, want 1", n)
			}
			poolIsClean(t, "keys", p.keys)
			// A deferred violation at COMMIT.
			mustExec(t, p, `CREATE TABLE orders (id int PRIMARY KEY, parent int REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED)`)
			r, err = p.Reserve(ctx, "idem:d")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Exec(ctx, `INSERT INTO orders VALUES (1, 2)`); err != nil {
				t.Fatal(err)
			}
			if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour); !errors.Is(err, store.ErrWriteFailed) {
				t.Fatalf("Save with a deferred violation: %v, want ErrWriteFailed", err)
			}
			if n := count(t, p, `SELECT count(*) FROM porch_idem_responses WHERE key = 'idem:d'`); n != 0 {
				t.Fatalf("stored: %d, want 0", n)
			}
			poolIsClean(t, "keys", p.keys)
		})
	}
}

// The owner's backend terminated between Reserve and Save: Save fails,
// nothing of the owner's is stored, the next owner gets a clean connection.
func TestOwnerTerminatedBeforeSave(t *testing.T) {
	dsn := pgtest.DSN(t)
	p := openInternal(t, pgtest.WithParam(dsn, "application_name", "porch_owner_term"), Options{KeyConns: 1})
	ctx := context.Background()
	mustExec(t, p, `CREATE TABLE effects (id int)`)
	r, err := p.Reserve(ctx, "idem:t")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Exec(ctx, `INSERT INTO effects VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l JOIN pg_stat_activity s USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND s.application_name = 'porch_owner_term'`); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	time.Sleep(50 * time.Millisecond)
	err = r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour)
	if err == nil {
		t.Fatal("Save on a terminated session: nil")
	}
	if errors.Is(err, store.ErrWriteFailed) {
		t.Errorf("Save on a terminated session: %v, should not be the owner's fault", err)
	}
	if n := count(t, p, `SELECT count(*) FROM effects`); n != 0 {
		t.Fatalf("effects: %d, want 0", n)
	}
	poolIsClean(t, "keys", p.keys)
	r, err = p.Reserve(ctx, "idem:t")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.Load(ctx); err != nil || ok {
		t.Fatalf("Load: %v %v", ok, err)
	}
	r.Release()
	poolIsClean(t, "keys", p.keys)
}

// A Reserve that gives up waiting for the lock (its context, or the
// server's statement or lock timeout) must not leave its connection in the
// pool inside the transaction, nor holding the lock once granted.
func TestReserveGivesUpWaiting(t *testing.T) {
	for _, param := range []string{"", "statement_timeout", "lock_timeout"} {
		t.Run("param="+param, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			a := openInternal(t, dsn, Options{KeyConns: 1})
			bdsn := dsn
			if param != "" {
				bdsn = pgtest.WithParam(dsn, param, "150")
			}
			b := openInternal(t, bdsn, Options{KeyConns: 1})
			ctx := context.Background()
			held, err := a.Reserve(ctx, "idem:w")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, err := b.Reserve(wctx, "idem:w")
				cancel()
				if err == nil {
					t.Fatal("b reserved a held key")
				}
				poolIsClean(t, "b keys", b.keys)
			}
			if err := held.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("a")}, time.Hour); err != nil {
				t.Fatal(err)
			}
			r, err := b.Reserve(ctx, "idem:w")
			if err != nil {
				t.Fatal(err)
			}
			if res, ok, err := r.Load(ctx); err != nil || !ok || string(res.Body) != "a" {
				t.Fatalf("Load: %q %v %v", res.Body, ok, err)
			}
			r.Release()
			poolIsClean(t, "b keys", b.keys)
			poolIsClean(t, "a keys", a.keys)
		})
	}
}

// A refund that fails in the second pipeline fails the whole batch: no hit
// counted, every caller told, and the writer's connection is not reused
// inside the aborted transaction (where the next batch's COMMIT would
// answer ROLLBACK, or worse, commit both).
func TestRefundFails(t *testing.T) {
	for _, mode := range []string{"", "simple_protocol", "exec"} {
		t.Run("mode="+mode, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			if mode != "" {
				dsn = pgtest.WithParam(dsn, "default_query_exec_mode", mode)
			}
			p := openInternal(t, dsn, Options{})
			mustExec(t, p, `CREATE FUNCTION no_refund() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.count < OLD.count THEN RAISE EXCEPTION 'no refund'; END IF; RETURN NEW; END $$`)
			mustExec(t, p, `CREATE TRIGGER no_refund BEFORE UPDATE ON porch_rate_counters FOR EACH ROW EXECUTE FUNCTION no_refund()`)
			batch := func(hits ...[2]int64) ([]commit.Op, error) {
				ops := make([]commit.Op, len(hits))
				for i, h := range hits {
					ops[i] = commit.Op{Hit: &commit.Hit{Key: "rate:r", Rule: fixed(h[1], time.Hour), N: h[0]}}
				}
				return ops, p.writeBatch(ops)
			}
			if _, err := batch([2]int64{1, 5}); err != nil {
				t.Fatal(err)
			}
			if _, err := batch([2]int64{1, 5}, [2]int64{10, 5}); err == nil {
				t.Fatal("a batch whose refund failed: nil")
			}
			if n := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = 'rate:r'`); n != 1 {
				t.Fatalf("stored count after the failed batch: %d, want 1", n)
			}
			poolIsClean(t, "writer", p.writer)
			for i := 0; i < 3; i++ {
				ops, err := batch([2]int64{1, 5})
				if err != nil {
					t.Fatalf("batch after the failed one: %v", err)
				}
				if got := wouldCount(ops[0].Hit); got != int64(2+i) {
					t.Fatalf("Count: %d, want %d", got, 2+i)
				}
			}
			if n := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = 'rate:r'`); n != 4 {
				t.Fatalf("stored count: %d, want 4", n)
			}
			poolIsClean(t, "writer", p.writer)
		})
	}
}

// Owners of one key on two instances, some giving up their wait, some
// failing at Save: exactly one side effect is committed, and it is the one
// whose Save succeeded.
func TestOwnersExcludeAcrossInstances(t *testing.T) {
	dsn := pgtest.DSN(t)
	stores := []*Store{openInternal(t, dsn, Options{KeyConns: 4}), openInternal(t, dsn, Options{KeyConns: 4})}
	mustExec(t, stores[0], `CREATE TABLE effects (key text, who int)`)
	mustExec(t, stores[0], `CREATE TABLE running (key text PRIMARY KEY)`)
	for round := 0; round < 20; round++ {
		key := fmt.Sprintf("idem:c%d", round)
		var saved, replayed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				p := stores[g%2]
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+g*15)*time.Millisecond)
				defer cancel()
				r, err := p.Reserve(ctx, key)
				if err != nil {
					return
				}
				_, ok, err := r.Load(context.Background())
				if err != nil {
					r.Release()
					return
				}
				if ok {
					replayed.Add(1)
					r.Release()
					return
				}
				// "running" is outside the owner's transaction: two at once would collide.
				if _, err := p.pool.Exec(context.Background(), `INSERT INTO running VALUES ($1)`, key); err != nil {
					t.Errorf("two owners of %s at once: %v", key, err)
					r.Release()
					return
				}
				time.Sleep(5 * time.Millisecond)
				_ = r.Exec(context.Background(), `INSERT INTO effects VALUES ($1, $2)`, key, g)
				if _, err := p.pool.Exec(context.Background(), `DELETE FROM running WHERE key = $1`, key); err != nil {
					t.Error(err)
				}
				if g%3 == 0 {
					// an owner whose side effect aborts
					_ = r.Exec(context.Background(), `SELECT 1/0`)
				}
				if err := r.Save(context.Background(), driver.Response{Digest: []byte("d"), Status: 201, Body: []byte{byte(g)}}, time.Hour); err == nil {
					saved.Add(1)
				}
			}(g)
		}
		wg.Wait()
		n := count(t, stores[0], `SELECT count(*) FROM effects WHERE key = $1`, key)
		if n != saved.Load() || n > 1 {
			t.Fatalf("round %d: %d side effects committed, %d Saves succeeded", round, n, saved.Load())
		}
	}
	for i, p := range stores {
		poolIsClean(t, fmt.Sprint("keys ", i), p.keys)
	}
}

// A waiter whose context ends just as the holder lets go may be granted the
// lock as it gives up: its connection is discarded, and the key must be
// free again promptly (no ghost backend keeps the lock).
func TestReserveGrantedAsItGivesUp(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openInternal(t, dsn, Options{KeyConns: 1})
	b := openInternal(t, dsn, Options{KeyConns: 1})
	c := openInternal(t, dsn, Options{KeyConns: 1})
	ctx := context.Background()
	var worst time.Duration
	for i := 0; i < 40; i++ {
		held, err := a.Reserve(ctx, "idem:g")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			r, err := b.Reserve(wctx, "idem:g")
			if err == nil {
				r.Release()
			}
			got <- err
		}()
		time.Sleep(20 * time.Millisecond)
		released := make(chan struct{})
		go func() { held.Release(); close(released) }()
		time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
		cancel()
		<-got
		<-released
		start := time.Now()
		r, err := c.Reserve(ctx, "idem:g")
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
		worst = max(worst, time.Since(start))
		poolIsClean(t, "b keys", b.keys)
	}
	if worst > 2*time.Second {
		t.Fatalf("a third owner waited %v for a key given up", worst)
	}
	t.Logf("worst wait %v", worst)
}

// A statement of the owner's that ends its transaction (a stray ROLLBACK or
// COMMIT in the handler's SQL) ends the key's lock with it: the writes
// before it are gone or committed alone, those after it commit on their
// own. Save must not then report the response as committed with them.
func TestOwnerStatementEndsTransaction(t *testing.T) {
	for _, stmt := range []string{"ROLLBACK", "COMMIT"} {
		t.Run(stmt, func(t *testing.T) {
			p := openInternal(t, pgtest.DSN(t), Options{KeyConns: 1})
			ctx := context.Background()
			mustExec(t, p, `CREATE TABLE effects (id int)`)
			r, err := p.Reserve(ctx, "idem:x")
			if err != nil {
				t.Fatal(err)
			}
			_ = r.Exec(ctx, `INSERT INTO effects VALUES (1)`)
			_ = r.Exec(ctx, stmt)
			_ = r.Exec(ctx, `INSERT INTO effects VALUES (2)`)
			err = r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("x")}, time.Hour)
			if err == nil {
				t.Errorf("Save after the owner's %s ended its transaction: nil (effects: %d rows, not the 2 the handler wrote in one transaction)",
					stmt, count(t, p, `SELECT count(*) FROM effects`))
			}
			poolIsClean(t, "keys", p.keys)
		})
	}
}
