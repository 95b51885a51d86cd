package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// slowInsert writes twenty million rows into table from a recursive CTE:
// many seconds of work on any machine, so that the budget's interrupt
// lands inside a write even under testBudget. Interrupted, it costs its
// budget and no more.
func slowInsert(table string) string {
	return `INSERT INTO ` + table + ` WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT 20000000)
		SELECT 'slow-' || i FROM c`
}

// testBudget is the ExecBudget of tests that put an owner past its budget
// beside owners and Execs that must commit: a one-row statement never
// takes it, however loaded the machine, and slowInsert always does. Under
// the default 50ms (and a 30ms one) a loaded machine (-race beside busy
// loops) ran a good neighbour's one-row INSERT past the budget, and the
// test saw it fail.
const testBudget = time.Second

// An owner's statement that runs past ExecBudget is interrupted and fails
// alone, as store.ErrWriteFailed wrapping ErrExecBudget: nothing of it
// is stored, and every other write batched with it (a limiter's counter, an
// earlier owner's statement and response, plain Execs) commits. SQLite
// answers an interrupted write inside an explicit transaction by rolling
// the whole transaction back (it did here, with and without a key on the
// table), so the batch must be written again without the offender rather
// than reported durable or failed. Before, the statement ran to its end
// (seconds) with every write of the process waiting on it.
func TestOwnerPastBudgetFailsAlone(t *testing.T) {
	for _, table := range []string{"ledger", "bulk"} {
		t.Run(table, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "porch.db"), Options{ExecBudget: testBudget})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			for _, q := range []string{`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`, `CREATE TABLE bulk (id)`} {
				if _, err := s.db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			now := s.Now()
			response := func(key string) *driver.Response {
				return &driver.Response{Key: key, Digest: []byte{1}, Status: 201, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
			}
			batch := []commit.Op{
				{Counter: &driver.Counter{Key: "k", State: driver.State{Start: now, Count: 3}, Window: time.Hour}},
				{Response: response("good"), Owner: []commit.Statement{{Query: `INSERT INTO ledger (id) VALUES ('good-owner')`}}},
				{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('victim-1')`}},
				{Response: response("slow"), Owner: []commit.Statement{{Query: slowInsert(table)}}},
				{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('victim-2')`}},
			}
			start := time.Now()
			if err := writeDeferred(s, batch); err != nil {
				t.Fatalf("the batch failed as a whole: %v (only the slow owner should)", err)
			}
			took := time.Since(start)
			for i, o := range batch {
				if i != 3 && o.Failed != nil {
					t.Errorf("write %d: %v, want it committed", i, o.Failed)
				}
			}
			if err := batch[3].Failed; !errors.Is(err, store.ErrWriteFailed) || !errors.Is(err, ErrExecBudget) {
				t.Fatalf("the slow owner (after %s): got %v, want store.ErrWriteFailed wrapping ErrExecBudget", took, err)
			}
			var ids []string
			rows, err := s.db.Query(`SELECT id FROM ledger UNION ALL SELECT id FROM bulk ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				rows.Scan(&id)
				ids = append(ids, id)
			}
			if want := []string{"good-owner", "victim-1", "victim-2"}; !slices.Equal(ids, want) {
				t.Errorf("rows: got %d (%.3v…), want %v", len(ids), ids, want)
			}
			if _, ok, err := s.loadResponse(context.Background(), "good"); err != nil || !ok {
				t.Errorf("the good owner's response: stored %v (%v), want stored", ok, err)
			}
			if _, ok, err := s.loadResponse(context.Background(), "slow"); err != nil || ok {
				t.Errorf("the slow owner's response: stored %v (%v), want not stored", ok, err)
			}
			var count int64
			if err := s.db.QueryRow(`SELECT count FROM porch_rate_current WHERE key = 'k'`).Scan(&count); err != nil || count != 3 {
				t.Errorf("the counter: %d (%v), want 3", count, err)
			}
		})
	}
}

// writeDeferred writes batch as the committer does: what a batch defers
// (its time for applications' statements ran out) leads the next one,
// until nothing is deferred. Each op's outcome is left in batch.
func writeDeferred(s *Store, batch []commit.Op) error {
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	cur := slices.Clone(batch)
	for len(cur) > 0 {
		if err := s.writeBatch(cur); err != nil {
			return err
		}
		var next []commit.Op
		var nextIdx []int
		for j, o := range cur {
			if o.Deferred {
				o.Deferred = false
				next, nextIdx = append(next, o), append(nextIdx, idx[j])
				continue
			}
			batch[idx[j]] = o
		}
		cur, idx = next, nextIdx
	}
	return nil
}

// Owners each just under the budget share one batch's time: the batch
// spends on them at most about two budgets (the budget, then the last
// owner's), and defers the rest to the next batch, where they run first.
// Without the batch's bound, twenty such owners held every limiter hit in
// their batch for twenty budgets (1.47 s at 50 ms).
func TestBatchBoundsOwnersTime(t *testing.T) {
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	if _, err := s.db.Exec(`CREATE TABLE bulk (id)`); err != nil {
		t.Fatal(err)
	}
	s.opt.ExecBudget = 40 * time.Millisecond
	now := s.Now()
	batch := []commit.Op{{Counter: &driver.Counter{Key: "k", State: driver.State{Start: now, Count: 1}, Window: time.Hour}}}
	for i := range 10 {
		r := &driver.Response{Key: fmt.Sprint("slow-", i), Digest: []byte{1}, Status: 201, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
		batch = append(batch, commit.Op{Response: r, Owner: []commit.Statement{{Query: slowInsert("bulk")}}})
	}
	start := time.Now()
	if err := s.writeBatch(batch); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	deferred := 0
	for _, o := range batch {
		if o.Deferred {
			deferred++
		}
	}
	if deferred == 0 {
		t.Errorf("ten owners each past a 40ms budget: none deferred, the batch took %s", took)
	}
	if batch[0].Deferred || batch[0].Failed != nil {
		t.Errorf("the counter: deferred %v, failed %v; want it committed with the first batch", batch[0].Deferred, batch[0].Failed)
	}
	t.Logf("first batch: %s, %d of 10 owners deferred", took, deferred)
}
