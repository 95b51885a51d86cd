package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// ownerBatch writes one batch on a fresh store: a victim's Exec, then an
// idempotency owner's statement, then another Exec, and returns the three
// ops' errors and the ledger's ids.
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
	res := &store.Response{Key: "k", Digest: []byte{1}, Status: 201, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
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
			want := []string{"taken", "victim-1", "victim-2"}
			if len(ids) != len(want) || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
				t.Errorf("ledger: got %v, want %v", ids, want)
			}
		})
	}
}
