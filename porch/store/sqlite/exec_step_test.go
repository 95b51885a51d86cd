package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// stepBudget is the ExecBudget of the long-step tests.
const stepBudget = 40 * time.Millisecond

// SQLite sees an interrupt only between the steps of a statement, so a
// statement whose one step builds or writes one large value ran to its end
// however long it took, held the shared writer and every limiter hit
// behind it, and, when nothing after the step noticed the interrupt,
// committed. On a 40 ms budget each of these held the writer for 1.7 to
// 4.7 s (the first two committed) before the writer bounded the size of a
// value; now each is refused before its long step (ErrRefused), writes
// nothing, and the counters written meanwhile commit. The recursive CTE
// is the control: many short steps, cut at the budget (its error wraps
// the budget's context.DeadlineExceeded, where one that ran to its end
// would say it finished late).
//
// What each case returns is the test, not how long it took: a loaded
// machine (-race beside busy loops) can hold a counter write for longer
// than any bound tight enough to tell a refusal from a long step. The
// times are logged.
func TestExecLongStepFailsWithinBudget(t *testing.T) {
	for _, c := range []struct {
		name  string
		query string
		arg   any
		want  error
	}{
		{"a large argument", `INSERT INTO t (x) VALUES (?)`, make([]byte, 96<<20), sqlite.ErrRefused},
		{"zeroblob", `INSERT INTO t (x) VALUES (zeroblob(?))`, int64(2e8), sqlite.ErrRefused},
		{"printf", `INSERT INTO t (x) SELECT length(printf('%.*c', ?, 'x'))`, int64(8e8), sqlite.ErrRefused},
		{"replace of hex", `INSERT INTO t (x) SELECT length(replace(hex(zeroblob(?)), '0', 'ab'))`, int64(2e7), sqlite.ErrRefused},
		{"recursive CTE", `INSERT INTO t (x) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT ?) SELECT count(*) FROM c`, int64(5e7), context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openSQLite(t, dbPath(t), sqlite.Options{ExecBudget: stepBudget})
			execSQL(t, s.DB(), `CREATE TABLE t (x)`)
			stop := startCounterLoad(t, s)
			start := time.Now()
			err := s.Exec(context.Background(), c.query, c.arg)
			took := time.Since(start)
			slowest := stop()
			t.Logf("Exec took %s; the slowest counter write beside it %s", took, slowest)
			switch {
			case c.want == sqlite.ErrRefused && !errors.Is(err, sqlite.ErrRefused):
				t.Errorf("Exec: got %v, want sqlite.ErrRefused (the writer's limits refuse the value before its long step)", err)
			case c.want != sqlite.ErrRefused && (!errors.Is(err, sqlite.ErrExecBudget) || !errors.Is(err, c.want)):
				t.Errorf("Exec: got %v, want sqlite.ErrExecBudget wrapping %v (interrupted at the budget)", err, c.want)
			}
			if n := countRows(t, s.DB(), `SELECT count(*) FROM t`); n != 0 {
				t.Errorf("rows in t: got %d, want 0 (nothing committed)", n)
			}
		})
	}
}

// A statement within the writer's limits can still outlast its budget in
// one step: thirty 800 KB values built in one row, with no step between
// them where SQLite looks for the interrupt. It must not commit, whether
// it is an Exec or an idempotency owner's: a caller told its statement
// overran must not find it written. Before, both committed.
func TestStatementPastBudgetInOneStepDoesNotCommit(t *testing.T) {
	terms := make([]string, 30)
	for i := range terms {
		terms[i] = `length(hex(randomblob(400000)))`
	}
	oneLongStep := `INSERT INTO t (x) VALUES (` + strings.Join(terms, " + ") + `)`
	s := openSQLite(t, dbPath(t), sqlite.Options{ExecBudget: 5 * time.Millisecond})
	execSQL(t, s.DB(), `CREATE TABLE t (x)`)
	ctx := context.Background()

	if err := s.Exec(ctx, oneLongStep); !errors.Is(err, sqlite.ErrExecBudget) {
		t.Errorf("Exec: got %v, want sqlite.ErrExecBudget", err)
	}
	r, err := s.Reserve(ctx, "owner")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Exec(ctx, oneLongStep); err != nil {
		t.Fatal(err)
	}
	err = r.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201, Body: []byte("ok")}, time.Hour)
	if !errors.Is(err, store.ErrWriteFailed) || !errors.Is(err, sqlite.ErrExecBudget) {
		t.Errorf("the owner's Save: got %v, want store.ErrWriteFailed wrapping sqlite.ErrExecBudget", err)
	}
	if n := countRows(t, s.DB(), `SELECT count(*) FROM t`); n != 0 {
		t.Errorf("rows in t: got %d, want 0 (nothing committed)", n)
	}
	if _, ok, err := s.LoadResponse(ctx, "owner"); err != nil || ok {
		t.Errorf("the owner's response: stored %v (%v), want not stored", ok, err)
	}
}

// startCounterLoad writes counters of fresh keys from four goroutines, one
// after another each, as limiter hits do, until stop is called; stop
// returns the slowest write's wait.
func startCounterLoad(t *testing.T, s *sqlite.Store) (stop func() time.Duration) {
	t.Helper()
	done := make(chan struct{})
	var mu sync.Mutex // protects slowest
	var slowest time.Duration
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				c := driver.Counter{Key: fmt.Sprintf("load-%d-%d", g, i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
				start := time.Now()
				if err := saveCounter(t, s, c); err != nil {
					t.Errorf("counter write: %v", err)
					return
				}
				mu.Lock()
				slowest = max(slowest, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	return func() time.Duration {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slowest
	}
}
