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

// A batch's first pass runs applications' statements without a savepoint
// each (applyBare). An owner whose second statement fails has its first in
// the transaction by then: the batch must be written again without that
// owner, so that neither of its statements nor its response commits, while
// every other write of the batch does. With more than one failure (two
// owners and an Exec of two statements), each fails alone as well.
func TestFailingOwnersLeaveNothingBehind(t *testing.T) {
	insert := func(id string) commit.Statement {
		return commit.Statement{Query: `INSERT INTO ledger (id) VALUES (?)`, Args: []any{id}}
	}
	owner := func(key string, stmts ...commit.Statement) commit.Op {
		return commit.Op{Response: &driver.Response{Key: key}, Owner: stmts}
	}
	tests := []struct {
		name    string
		batch   []commit.Op
		failing []int
		ids     []string // in the ledger after the batch, besides 'taken'
	}{
		{
			name: "one failing owner",
			batch: []commit.Op{
				owner("good-1", insert("good-1a"), insert("good-1b")),
				{Counter: &driver.Counter{Key: "k", State: driver.State{Count: 2}}},
				owner("bad-1", insert("bad-1a"), insert("taken")),
				{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('exec-1')`}},
				owner("good-2", insert("good-2a")),
				{Response: &driver.Response{Key: "plain"}},
			},
			failing: []int{2},
			ids:     []string{"exec-1", "good-1a", "good-1b", "good-2a"},
		},
		{
			name: "several failures",
			batch: []commit.Op{
				owner("good-1", insert("good-1a")),
				owner("bad-1", insert("bad-1a"), insert("taken")),
				owner("bad-2", insert("bad-2a"), insert("bad-2a")),
				{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('exec-bad'); INSERT INTO ledger (id) VALUES ('taken')`}},
				{Counter: &driver.Counter{Key: "k", State: driver.State{Count: 2}}},
				owner("good-2", insert("good-2a")),
			},
			failing: []int{1, 2, 3},
			ids:     []string{"good-1a", "good-2a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
			t.Cleanup(func() { s.Close(context.Background()) })
			for _, q := range []string{`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`, `INSERT INTO ledger (id) VALUES ('taken')`} {
				if _, err := s.db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			now := s.Now()
			for _, o := range tt.batch {
				if r := o.Response; r != nil {
					r.Digest, r.Status, r.Body, r.Created, r.Expires = []byte{1}, 201, []byte("ok"), now, now.Add(time.Hour)
				}
				if c := o.Counter; c != nil {
					c.Start, c.Window = now, time.Hour
				}
			}
			if err := s.writeBatch(tt.batch); err != nil {
				t.Fatalf("the batch failed as a whole: %v (only the failing writes should)", err)
			}
			for i, o := range tt.batch {
				fails := slices.Contains(tt.failing, i)
				switch {
				case o.Deferred:
					t.Errorf("write %d deferred, want it written in this batch", i)
				case fails && o.Failed == nil:
					t.Errorf("write %d committed, want it failed", i)
				case fails && o.Exec == nil && !errors.Is(o.Failed, store.ErrWriteFailed):
					t.Errorf("owner %d: %v, want store.ErrWriteFailed", i, o.Failed)
				case !fails && o.Failed != nil:
					t.Errorf("write %d: %v, want it committed", i, o.Failed)
				}
				if r := o.Response; r != nil {
					if _, ok, err := s.loadResponse(context.Background(), r.Key); err != nil || ok == fails {
						t.Errorf("response %s: stored %v (%v), want %v", r.Key, ok, err, !fails)
					}
				}
			}
			var ids []string
			rows, err := s.db.Query(`SELECT id FROM ledger WHERE id <> 'taken' ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				rows.Scan(&id)
				ids = append(ids, id)
			}
			if !slices.Equal(ids, tt.ids) {
				t.Errorf("ledger: got %v, want %v", ids, tt.ids)
			}
			var count int64
			if err := s.db.QueryRow(`SELECT count FROM porch_rate_current WHERE key = 'k'`).Scan(&count); err != nil || count != 2 {
				t.Errorf("the counter: %d (%v), want 2", count, err)
			}
		})
	}
}

// Once a batch has had an application's statement fail, the next batches
// run owners in savepoints from their first pass, so that a client sending
// failing writes on purpose cannot make every batch run twice; after
// isolateAfterFailure clean batches the first pass runs bare again.
func TestFailuresTurnIsolationOn(t *testing.T) {
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	for _, q := range []string{`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`, `INSERT INTO ledger (id) VALUES ('taken')`} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	batch := func(failing bool) []commit.Op {
		now := s.Now()
		n++
		id := fmt.Sprintf("good-%d", n)
		bad := fmt.Sprintf("bad-%d", n)
		if failing {
			bad = "taken"
		}
		ops := []commit.Op{
			{Response: &driver.Response{Key: "ok-" + id}, Owner: []commit.Statement{{Query: `INSERT INTO ledger (id) VALUES (?)`, Args: []any{id}}}},
			{Response: &driver.Response{Key: "maybe-" + id}, Owner: []commit.Statement{{Query: `INSERT INTO ledger (id) VALUES (?)`, Args: []any{bad}}}},
		}
		for _, o := range ops {
			o.Response.Digest, o.Response.Status, o.Response.Body, o.Response.Created, o.Response.Expires = []byte{1}, 201, []byte("ok"), now, now.Add(time.Hour)
		}
		return ops
	}
	write := func(failing bool) (passes int) {
		t.Helper()
		b := batch(failing)
		before := s.passes
		if err := s.writeBatch(b); err != nil {
			t.Fatal(err)
		}
		if b[0].Failed != nil || b[0].Deferred || b[1].Deferred {
			t.Fatalf("first owner failed: %v; deferred %v and %v; want it committed and neither deferred", b[0].Failed, b[0].Deferred, b[1].Deferred)
		}
		if got := b[1].Failed != nil; got != failing {
			t.Fatalf("second owner failed: %v, want %v", got, failing)
		}
		return s.passes - before
	}
	if p := write(true); p != 2 {
		t.Fatalf("the first failure took %d passes, want 2 (bare, then again without it)", p)
	}
	for i := range 3 {
		if p := write(true); p != 1 {
			t.Fatalf("failure %d after the first took %d passes, want 1 (isolated from the first pass)", i+2, p)
		}
	}
	for range isolateAfterFailure {
		write(false)
	}
	if p := write(true); p != 2 {
		t.Fatalf("a failure after %d clean batches took %d passes, want 2 (the first pass bare again)", isolateAfterFailure, p)
	}
}
