package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Each kind of failure in a batch's bare first pass and in the raw
// response statement fails its own write alone.

func failureStore(t *testing.T, opt Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "porch.db"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	for _, q := range []string{
		`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`,
		`CREATE TABLE bulk (id)`,
		`CREATE TABLE checked (id TEXT PRIMARY KEY, n INTEGER CHECK (n > 0))`,
		`INSERT INTO ledger (id) VALUES ('taken')`,
	} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func failureResp(s *Store, key string) *driver.Response {
	now := s.Now()
	return &driver.Response{Key: key, Digest: []byte{1}, Status: 201, Body: []byte("ok-" + key), Created: now, Expires: now.Add(time.Hour)}
}

func ins(id string) commit.Statement {
	return commit.Statement{Query: `INSERT INTO ledger (id) VALUES (?)`, Args: []any{id}}
}

func ledgerIDs(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.db.Query(`SELECT id FROM ledger WHERE id <> 'taken' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	return ids
}

// badOwners is every way an owner's statements can fail on their own terms.
func badOwners() map[string][]commit.Statement {
	return map[string][]commit.Statement{
		"constraint":             {ins("BAD-a"), ins("taken")},
		"check constraint":       {ins("BAD-a"), {Query: `INSERT INTO checked VALUES ('x', 0)`}},
		"syntax":                 {ins("BAD-a"), {Query: `INSERT INTO ledger VALUES (`}},
		"no such table":          {ins("BAD-a"), {Query: `INSERT INTO nowhere VALUES (1)`}},
		"refused COMMIT":         {ins("BAD-a"), {Query: `COMMIT`}},
		"refused in multi":       {{Query: `INSERT INTO ledger VALUES ('BAD-a'); INSERT INTO ledger VALUES ('BAD-b'); ROLLBACK`}},
		"refused CREATE":         {ins("BAD-a"), {Query: `CREATE TABLE t2 (x)`}},
		"refused porch write":    {ins("BAD-a"), {Query: `DELETE FROM porch_idem_responses`}},
		"OR ROLLBACK":            {ins("BAD-a"), {Query: `INSERT OR ROLLBACK INTO ledger VALUES ('taken')`}},
		"OR FAIL half a stmt":    {{Query: `INSERT OR FAIL INTO ledger SELECT 'BAD-' || value FROM (SELECT 'a' AS value UNION ALL SELECT 'b') UNION ALL SELECT 'taken'`}},
		"bad arg type":           {ins("BAD-a"), {Query: `INSERT INTO ledger VALUES (?)`, Args: []any{struct{}{}}}},
		"too few args":           {ins("BAD-a"), {Query: `INSERT INTO ledger VALUES (?, ?)`, Args: []any{"x"}}},
		"budget":                 {ins("BAD-a"), {Query: slowInsert("bulk")}},
		"mismatch (rowid)":       {ins("BAD-a"), {Query: `INSERT INTO bulk (rowid, id) VALUES ('notanint', 1)`}},
		"RAISE(ABORT) in select": {ins("BAD-a"), {Query: `INSERT INTO ledger SELECT RAISE(ABORT, 'no') FROM (SELECT 1)`}},
	}
}

// Each bad owner, placed among good owners, Execs, a counter and plain
// responses, in the first position, the middle and the last, and twice,
// fails alone, and nothing of it stays.
func TestEveryKindOfOwnerFailureFailsAlone(t *testing.T) {
	for name, bad := range badOwners() {
		for _, pos := range []string{"first", "middle", "last", "twice"} {
			t.Run(name+"/"+pos, func(t *testing.T) {
				t.Parallel()
				s := failureStore(t, Options{ExecBudget: testBudget})
				good := func(k string) commit.Op {
					return commit.Op{Response: failureResp(s, k), Owner: []commit.Statement{ins(k + "-1"), ins(k + "-2")}}
				}
				badOp := func(k string) commit.Op {
					stmts := slices.Clone(bad)
					for i := range stmts {
						stmts[i].Query = strings.ReplaceAll(stmts[i].Query, "BAD-", k+"-")
						stmts[i].Args = slices.Clone(stmts[i].Args)
						for j, a := range stmts[i].Args {
							if str, ok := a.(string); ok {
								stmts[i].Args[j] = strings.ReplaceAll(str, "BAD-", k+"-")
							}
						}
					}
					return commit.Op{Response: failureResp(s, k), Owner: stmts}
				}
				now := s.Now()
				middle := []commit.Op{
					good("g1"),
					{Counter: &driver.Counter{Key: "c", State: driver.State{Start: now, Count: 7}, Window: time.Hour}},
					{Exec: &commit.Statement{Query: `INSERT INTO ledger VALUES ('e1')`}},
					{Response: failureResp(s, "p1")},
					{Response: failureResp(s, "p2")},
					good("g2"),
				}
				var batch []commit.Op
				switch pos {
				case "first":
					batch = append([]commit.Op{badOp("b1")}, middle...)
				case "middle":
					batch = slices.Concat(middle[:3], []commit.Op{badOp("b1")}, middle[3:])
				case "last":
					batch = append(slices.Clone(middle), badOp("b1"))
				case "twice":
					batch = slices.Concat([]commit.Op{badOp("b1")}, middle[:3], []commit.Op{badOp("b2")}, middle[3:])
				}
				if err := writeDeferred(s, batch); err != nil {
					t.Fatalf("the batch failed as a whole: %v", err)
				}
				var want []string
				for _, o := range batch {
					isBad := o.Response != nil && strings.HasPrefix(o.Response.Key, "b")
					switch {
					case isBad && !errors.Is(o.Failed, store.ErrWriteFailed):
						t.Errorf("bad owner %s: %v, want store.ErrWriteFailed", o.Response.Key, o.Failed)
					case !isBad && o.Failed != nil:
						t.Errorf("a neighbour failed: %+v: %v", o, o.Failed)
					}
					if o.Response != nil {
						_, ok, err := s.loadResponse(context.Background(), o.Response.Key)
						if err != nil || ok == isBad {
							t.Errorf("response %s stored %v (%v), want %v", o.Response.Key, ok, err, !isBad)
						}
						if !isBad {
							for _, st := range o.Owner {
								want = append(want, st.Args[0].(string))
							}
						}
					}
				}
				want = append(want, "e1")
				slices.Sort(want)
				if got := ledgerIDs(t, s); !slices.Equal(got, want) {
					t.Errorf("ledger %v, want %v", got, want)
				}
				var n int
				if err := s.db.QueryRow(`SELECT count(*) FROM bulk`).Scan(&n); err != nil || n != 0 {
					t.Errorf("bulk has %d rows (%v), want 0", n, err)
				}
				var count int64
				if err := s.db.QueryRow(`SELECT count FROM porch_rate_current WHERE key = 'c'`).Scan(&count); err != nil || count != 7 {
					t.Errorf("counter %d (%v), want 7", count, err)
				}
			})
		}
	}
}

// Every owner and Exec of a large batch fails, in every way at once,
// including several that end the transaction in the isolated passes: the
// batch still commits its counter, and each passes writes again at most
// once per offender.
func TestBatchWhereEveryoneFails(t *testing.T) {
	s := failureStore(t, Options{ExecBudget: -1}) // no slow owner here: nothing may fail for its speed
	now := s.Now()
	var batch []commit.Op
	i := 0
	for name, bad := range badOwners() {
		if name == "budget" {
			continue // deferral would muddy the count
		}
		for range 3 {
			i++
			batch = append(batch, commit.Op{Response: failureResp(s, fmt.Sprintf("b%d", i)), Owner: bad})
		}
	}
	for range 10 {
		batch = append(batch, commit.Op{Exec: &commit.Statement{Query: `INSERT OR ROLLBACK INTO ledger VALUES ('taken')`}})
	}
	batch = append(batch, commit.Op{Counter: &driver.Counter{Key: "c", State: driver.State{Start: now, Count: 3}, Window: time.Hour}})
	if err := writeDeferred(s, batch); err != nil {
		t.Fatalf("the batch failed as a whole: %v", err)
	}
	for k, o := range batch[:len(batch)-1] {
		if o.Failed == nil {
			t.Errorf("write %d committed, want it failed", k)
		}
	}
	if batch[len(batch)-1].Failed != nil {
		t.Errorf("counter failed: %v", batch[len(batch)-1].Failed)
	}
	if got := ledgerIDs(t, s); len(got) != 0 {
		t.Errorf("ledger %v, want empty", got)
	}
}

// A plain response row whose write fails (a NOT NULL digest missing) fails
// the batch closed: nothing of it commits, in particular not an owner's
// statements run before it in the bare pass; the driver's statement is
// usable by the next batch, which stores every row it is given.
func TestResponseRowFailureFailsClosed(t *testing.T) {
	s := failureStore(t, Options{})
	broken := failureResp(s, "broken")
	broken.Digest = nil
	batch := []commit.Op{
		{Response: failureResp(s, "o1"), Owner: []commit.Statement{ins("o1")}},
		{Response: failureResp(s, "p1")},
		{Response: broken},
		{Response: failureResp(s, "p2")},
	}
	err := writeDeferred(s, batch)
	if err == nil {
		t.Fatal("a batch with an unwritable response row committed")
	}
	t.Logf("batch error: %v", err)
	if got := ledgerIDs(t, s); len(got) != 0 {
		t.Errorf("ledger %v after a failed batch, want empty", got)
	}
	for _, k := range []string{"o1", "p1", "p2", "broken"} {
		if _, ok, _ := s.loadResponse(context.Background(), k); ok {
			t.Errorf("%s stored by a failed batch", k)
		}
	}
	// An owner's response row failing: same, and the owner's statements go too.
	broken2 := failureResp(s, "broken2")
	broken2.Digest = nil
	batch = []commit.Op{
		{Response: failureResp(s, "o2"), Owner: []commit.Statement{ins("o2")}},
		{Response: broken2, Owner: []commit.Statement{ins("o3")}},
	}
	if err := writeDeferred(s, batch); err == nil {
		t.Fatal("a batch with an unwritable owner's response row committed")
	}
	if got := ledgerIDs(t, s); len(got) != 0 {
		t.Errorf("ledger %v after a failed batch, want empty", got)
	}
	// The statement was left reset: the next batch's rows are all written,
	// with their own values (no binding of the failed row left over).
	next := []commit.Op{{Response: failureResp(s, "n1")}, {Response: &driver.Response{Key: "n2", Digest: []byte{9}, Status: 204,
		Created: s.Now(), Expires: s.Now().Add(time.Hour)}}}
	if err := writeDeferred(s, next); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n1", "n2"} {
		res, ok, err := s.loadResponse(context.Background(), k)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", k, ok, err)
		}
		if k == "n2" && (res.Status != 204 || res.Body == nil || len(res.Body) != 0 || res.Digest[0] != 9) {
			t.Errorf("n2 stored as %+v", res)
		}
	}
}
