package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func TestGroupCommit(t *testing.T) {
	const writers, perWriter = 64, 50
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	release := holdCommitter(t, s)

	var calls [writers * perWriter]atomic.Int32
	var failed atomic.Int32
	var all sync.WaitGroup // one per write, done when its callback ran
	var queued sync.WaitGroup
	for w := range writers {
		queued.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				c := driver.Counter{Key: fmt.Sprintf("k%d", n), State: driver.State{Start: s.Now(), Count: int64(n + 1)}, Window: time.Hour}
				all.Add(1)
				err := s.SaveCounter(c, func(err error) {
					if err != nil {
						failed.Add(1)
					}
					calls[n].Add(1)
					all.Done()
				})
				if err != nil {
					t.Errorf("queue %s: %v", c.Key, err)
					all.Done()
				}
			}
		})
	}
	queued.Wait() // every write is in the queue behind the held commit
	release()
	all.Wait()

	if n := failed.Load(); n != 0 {
		t.Errorf("got %d done callbacks with an error, want none", n)
	}
	for n := range calls {
		if got := calls[n].Load(); got != 1 {
			t.Fatalf("write k%d: got its done called %d times, want once", n, got)
		}
	}
	st := s.Stats()
	if st.Writes != writers*perWriter+1 {
		t.Errorf("got Stats().Writes = %d, want %d", st.Writes, writers*perWriter+1)
	}
	if st.Commits >= st.Writes {
		t.Errorf("got %d commits for %d writes, want fewer commits than writes", st.Commits, st.Writes)
	}
	if st.Failed != 0 {
		t.Errorf("got Stats().Failed = %d, want 0", st.Failed)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current WHERE key LIKE 'k%'`); got != writers*perWriter {
		t.Errorf("got %d rows, want %d", got, writers*perWriter)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current WHERE key LIKE 'k%' AND count <> CAST(substr(key, 2) AS INTEGER) + 1`); got != 0 {
		t.Errorf("got %d rows with another write's count, want 0", got)
	}
}

func TestGroupCommitUnderRealConcurrency(t *testing.T) {
	// No held commit here: writers race the committer itself.
	const writers, perWriter = 64, 50
	s := openSQLite(t, dbPath(t), sqlite.Options{})
	var failed atomic.Int32
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				c := driver.Counter{Key: fmt.Sprintf("w%d-%d", w, i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
				done := make(chan error, 1)
				if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
					t.Errorf("queue %s: %v", c.Key, err)
					return
				}
				if err := <-done; err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("got %d failed writes, want none", n)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current`); got != writers*perWriter {
		t.Errorf("got %d rows, want %d", got, writers*perWriter)
	}
	if st := s.Stats(); st.Writes != writers*perWriter {
		t.Errorf("got Stats().Writes = %d, want %d", st.Writes, writers*perWriter)
	}
}

func TestDoneRunsAfterCommit(t *testing.T) {
	path := dbPath(t)
	s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	// Another connection sees only committed rows: WAL readers never see
	// an open transaction's writes.
	other, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })

	type seen struct {
		found bool
		err   error
	}
	got := make(chan seen, 1)
	c := driver.Counter{Key: "visible", State: driver.State{Start: s.Now(), Count: 3}, Window: time.Minute}
	err = s.SaveCounter(c, func(err error) {
		if err != nil {
			got <- seen{err: err}
			return
		}
		var n int64
		qerr := other.QueryRow(`SELECT count FROM porch_rate_current WHERE key = ?`, c.Key).Scan(&n)
		switch {
		case errors.Is(qerr, sql.ErrNoRows):
			got <- seen{}
		case qerr != nil:
			got <- seen{err: qerr}
		default:
			got <- seen{found: n == 3}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.err != nil || !g.found {
		t.Errorf("inside done, another connection got (found %v, err %v), want the committed row", g.found, g.err)
	}
}

func TestFailedCommitIsReported(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	execSQL(t, s.DB(), `CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		BEGIN SELECT RAISE(ABORT, 'boom'); END`)

	err := saveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute})
	if err == nil {
		t.Fatal("got done(nil) for a write the database refused, want the error")
	}
	st := s.Stats()
	if st.Failed != 1 || st.Commits != 0 {
		t.Errorf("got Stats() = %+v, want Failed 1 and Commits 0", st)
	}
	if _, _, ok := counterRow(t, s.DB(), "k"); ok {
		t.Error("got a row for the failed write, want none")
	}
}

func TestFailedBatchFailsEveryWrite(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	release := holdCommitter(t, s)
	execSQL(t, s.DB(), `CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		WHEN NEW.key = 'bad' BEGIN SELECT RAISE(ABORT, 'boom'); END`)

	errs := make(chan error, 2)
	for _, key := range []string{"good", "bad"} {
		c := driver.Counter{Key: key, State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute}
		if err := s.SaveCounter(c, func(err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	release() // both writes go in one batch
	for range 2 {
		if err := <-errs; err == nil {
			t.Error("got done(nil) for a write in a failed batch, want the batch's error")
		}
	}
	// The batch is one transaction: the good write was rolled back with it.
	if _, _, ok := counterRow(t, s.DB(), "good"); ok {
		t.Error("got a row for a write whose batch failed, want none")
	}
}

func TestCounterWritesAppend(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	execSQL(t, s.DB(), `CREATE TABLE test_log (op TEXT NOT NULL, key TEXT NOT NULL)`)
	for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
		execSQL(t, s.DB(), `CREATE TRIGGER log_`+op+` AFTER `+op+` ON porch_rate_journal
			BEGIN INSERT INTO test_log VALUES ('`+op+`', 'k'); END`)
		execSQL(t, s.DB(), `CREATE TRIGGER log_counters_`+op+` AFTER `+op+` ON porch_rate_counters
			BEGIN INSERT INTO test_log VALUES ('counters `+op+`', 'k'); END`)
	}

	start := s.Now()
	for n := int64(1); n <= 3; n++ { // one commit each: no collapsing
		mustSaveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: start, Count: n}, Window: time.Minute})
	}

	if got, _, _ := counterRow(t, s.DB(), "k"); got != 3 {
		t.Errorf("got count %d, want 3", got)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current`); got != 1 {
		t.Errorf("got %d rows, want 1", got)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM test_log WHERE op = 'INSERT'`); got != 3 {
		t.Errorf("got %d journal appends, want 3", got)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM test_log WHERE op <> 'INSERT'`); got != 0 {
		t.Errorf("got %d other writes, want 0 (a counter write only appends)", got)
	}
}

func TestBatchCollapsesWritesOfOneKey(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	execSQL(t, s.DB(), `CREATE TABLE test_log (key TEXT NOT NULL, count INTEGER NOT NULL)`)
	execSQL(t, s.DB(), `CREATE TRIGGER log_insert AFTER INSERT ON porch_rate_journal
		BEGIN INSERT INTO test_log VALUES (NEW.key, NEW.count); END`)
	release := holdCommitter(t, s)

	start := s.Now()
	errs := make(chan error, 4)
	for _, c := range []driver.Counter{
		{Key: "k", State: driver.State{Start: start, Count: 1}, Window: time.Minute},
		{Key: "other", State: driver.State{Start: start, Count: 7}, Window: time.Minute},
		{Key: "k", State: driver.State{Start: start, Count: 2}, Window: time.Minute},
		{Key: "k", State: driver.State{Start: start, Count: 3}, Window: time.Minute},
	} {
		if err := s.SaveCounter(c, func(err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	release()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("got done(%v), want nil", err)
		}
	}

	if got, _, _ := counterRow(t, s.DB(), "k"); got != 3 {
		t.Errorf("got count %d, want the newest write's 3", got)
	}
	if got, _, _ := counterRow(t, s.DB(), "other"); got != 7 {
		t.Errorf("got other's count %d, want 7", got)
	}
	if got := countRows(t, s.DB(), `SELECT count(*) FROM test_log WHERE key = 'k'`); got != 1 {
		t.Errorf("got %d statements for k in one batch, want 1 (superseded writes are skipped)", got)
	}
	if st := s.Stats(); st.Commits != 2 || st.Writes != 5 {
		t.Errorf("got Stats() = %+v, want 2 commits carrying 5 writes (counted before collapsing)", st)
	}
}

func TestCommitPrunesBoundedly(t *testing.T) {
	const expired = 20
	tests := []struct {
		name      string
		pruneRows int
		wantLeft  []int // expired rows left after each of two ordinary commits
	}{
		{"bounded", 5, []int{15, 10}},
		{"default bound", 0, []int{0, 0}}, // the default PruneRows, 64, >= 20
		{"disabled", -1, []int{20, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeClock()
			s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: clock, PruneRows: tt.pruneRows}})
			// Stored responses, which the prune clears (counters are the
			// journal's cleaning's; see journal_internal_test.go). Saved
			// through the store, which learns from each save when the
			// next prune is due.
			ctx := context.Background()
			for i := range expired {
				hold, err := s.Reserve(ctx, fmt.Sprintf("old-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if err := hold.Save(ctx, driver.Response{Digest: []byte{0}, Status: 200}, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(2 * time.Minute) // every old-* response has expired

			const expiredRows = `SELECT count(*) FROM porch_idem_responses WHERE key LIKE 'old-%'`
			if got := countRows(t, s.DB(), expiredRows); got != expired {
				t.Fatalf("before pruning: got %d expired rows, want %d", got, expired)
			}
			for i, want := range tt.wantLeft {
				mustSaveCounter(t, s, driver.Counter{Key: fmt.Sprintf("live-%d", i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute})
				if got := countRows(t, s.DB(), expiredRows); got != want {
					t.Errorf("after commit %d: got %d expired rows, want %d", i+1, got, want)
				}
			}
			if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current WHERE key LIKE 'live-%'`); got != len(tt.wantLeft) {
				t.Errorf("got %d live rows, want %d: pruning must not touch open windows", got, len(tt.wantLeft))
			}
		})
	}
}

func TestCloseFlushesQueuedWrites(t *testing.T) {
	path := dbPath(t)
	s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	const n = 100
	for i := range n {
		if err := s.SaveCounter(driver.Counter{Key: fmt.Sprintf("k%d", i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}, nil); err != nil {
			t.Fatal(err)
		}
	}
	closeStore(t, s)
	err := s.SaveCounter(driver.Counter{Key: "late", State: driver.State{Start: wall0, Count: 1}, Window: time.Hour}, func(error) {
		t.Error("done ran for a write refused after Close")
	})
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("got SaveCounter after Close = %v, want ErrClosed", err)
	}

	s = openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	if got := countRows(t, s.DB(), `SELECT count(*) FROM porch_rate_current`); got != n {
		t.Errorf("after reopen: got %d rows, want %d", got, n)
	}
}

func TestCloseHonoursContext(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	release := holdCommitter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("got Close(cancelled ctx) while a commit is stuck = %v, want context.Canceled", err)
	}
	release()
	closeStore(t, s)
}
