package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// ownerBatch writes one batch on a fresh store: a victim's Exec, then an
// idempotency owner's statement, then another Exec, and returns the three
// ops' errors and the ledger's ids. A later batch's insert ('later') follows
// it, so that anything the owner left behind on the writer (a trigger) shows
// in the ids.
func ownerBatch(t *testing.T, ownerQuery string) (errs [3]error, ids []string) {
	t.Helper()
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	if _, err := s.db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`INSERT INTO ledger (id) VALUES ('taken')`); err != nil {
		t.Fatal(err)
	}
	now := s.Now()
	res := &driver.Response{Key: "k", Digest: []byte{1}, Status: 201, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
	batch := []commit.Op{
		{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('victim-1')`}},
		{Response: res, Owner: []commit.Statement{{Query: ownerQuery}}},
		{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('victim-2')`}},
	}
	if err := s.writeBatch(batch); err != nil {
		t.Fatalf("the batch failed as a whole: %v (only the owner's write should)", err)
	}
	for i := range batch {
		errs[i] = batch[i].Failed
	}
	later := []commit.Op{{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('later')`}}}
	if err := s.writeBatch(later); err != nil || later[0].Failed != nil {
		t.Fatalf("a later batch's insert: %v, %v", err, later[0].Failed)
	}
	rows, err := s.db.Query(`SELECT id FROM ledger ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	if _, ok, err := s.loadResponse(context.Background(), "k"); err != nil || ok {
		t.Errorf("the failed owner's response: stored %v (%v), want not stored", ok, err)
	}
	return errs, ids
}

// An owner's statement that would end or reconfigure the batch's
// transaction fails alone, as store.ErrWriteFailed: the other writes batched with
// it commit. Before, INSERT OR ROLLBACK rolled the whole batch back and
// failed every caller in it, and a COMMIT could commit half of one.
func TestOwnerStatementCannotEndTheBatch(t *testing.T) {
	tests := []struct{ name, query string }{
		{"OR ROLLBACK conflict", `INSERT OR ROLLBACK INTO ledger (id) VALUES ('taken')`},
		{"COMMIT", `COMMIT`},
		{"ROLLBACK", `ROLLBACK`},
		{"write then COMMIT", `INSERT INTO ledger (id) VALUES ('owner'); COMMIT`},
		{"RELEASE the batch's savepoint", `RELEASE porch_exec`},
		{"PRAGMA", `PRAGMA journal_mode = DELETE`},
		{"ATTACH", `ATTACH DATABASE ':memory:' AS other`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs, ids := ownerBatch(t, tc.query)
			if errs[0] != nil || errs[2] != nil {
				t.Errorf("the other writes: got %v and %v, want both committed", errs[0], errs[2])
			}
			if !errors.Is(errs[1], store.ErrWriteFailed) {
				t.Errorf("the owner's write: got %v, want store.ErrWriteFailed", errs[1])
			}
			if want := []string{"later", "taken", "victim-1", "victim-2"}; !slices.Equal(ids, want) {
				t.Errorf("ledger: got %v, want %v", ids, want)
			}
		})
	}
}

// An owner's statement that would outlive itself on the shared writer (a
// schema change, temporary or not) or write porch's own tables fails alone,
// as store.ErrWriteFailed wrapping ErrRefused, and leaves nothing behind:
// no object in either schema, and no trigger firing on a later caller's
// insert. Before, CREATE TEMP TRIGGER stayed on the committer's connection
// and fired on every later insert into its table, by any request.
func TestOwnerStatementCannotOutliveItself(t *testing.T) {
	tests := []struct{ name, query string }{
		{"TEMP TRIGGER", `CREATE TEMP TRIGGER spy AFTER INSERT ON ledger BEGIN INSERT INTO ledger (id) VALUES ('fired-' || new.id); END`},
		{"TEMP TABLE", `CREATE TEMP TABLE scratch (x)`},
		{"TEMP VIEW", `CREATE TEMP VIEW peek AS SELECT id FROM ledger`},
		{"TEMP INDEX after TEMP TABLE", `CREATE TEMP TABLE scratch (x); CREATE INDEX temp.scratch_x ON scratch (x)`},
		{"TRIGGER on a main table", `CREATE TRIGGER spy AFTER INSERT ON ledger BEGIN INSERT INTO ledger (id) VALUES ('fired-' || new.id); END`},
		{"TRIGGER on porch's table", `CREATE TRIGGER spy AFTER INSERT ON porch_rate_journal BEGIN INSERT INTO ledger (id) VALUES ('fired'); END`},
		{"CREATE TABLE", `CREATE TABLE other (x)`},
		{"ALTER TABLE", `ALTER TABLE ledger ADD COLUMN note TEXT`},
		{"DROP TABLE", `DROP TABLE ledger`},
		{"INSERT into porch_idem_responses", `INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
			VALUES ('forged', x'01', 200, 'text/plain', x'', 0, 9223372036854775807)`},
		{"INSERT into porch_rate_journal", `INSERT INTO porch_rate_journal (key, window_start, window_ms, count, expires_at)
			VALUES ('k', 0, 1000, 0, 9223372036854775807)`},
		{"DELETE from porch_rate_journal", `DELETE FROM porch_rate_journal`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs, ids := ownerBatch(t, tc.query)
			if errs[0] != nil || errs[2] != nil {
				t.Errorf("the other writes: got %v and %v, want both committed", errs[0], errs[2])
			}
			if !errors.Is(errs[1], store.ErrWriteFailed) || !errors.Is(errs[1], ErrRefused) {
				t.Errorf("the owner's write: got %v, want store.ErrWriteFailed wrapping ErrRefused", errs[1])
			}
			if want := []string{"later", "taken", "victim-1", "victim-2"}; !slices.Equal(ids, want) {
				t.Errorf("ledger: got %v, want %v (a trigger fired, or the table went)", ids, want)
			}
		})
	}
}

// What an owner needs still runs: writes to its own tables, through an
// AUTOINCREMENT table (SQLite writes sqlite_sequence for it), an upsert,
// RETURNING and a recursive CTE.
func TestOwnerRowWritesAllowed(t *testing.T) {
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	if _, err := s.db.Exec(`CREATE TABLE seq (n INTEGER PRIMARY KEY AUTOINCREMENT, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO seq (v) VALUES (1)`,
		`INSERT INTO seq (n, v) VALUES (1, 2) ON CONFLICT (n) DO UPDATE SET v = excluded.v`,
		`INSERT INTO seq (v) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3) SELECT i FROM c RETURNING n`,
		`UPDATE seq SET v = v + (SELECT count(*) FROM porch_idem_responses)`,
		`DELETE FROM seq WHERE n = 4`,
	} {
		batch := []commit.Op{{Exec: &commit.Statement{Query: q}}}
		if err := s.writeBatch(batch); err != nil || batch[0].Failed != nil {
			t.Errorf("%s: %v, %v; want it allowed", q, err, batch[0].Failed)
		}
	}
}
