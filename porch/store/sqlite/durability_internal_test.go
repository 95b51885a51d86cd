package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// SQLite's synchronous levels, as PRAGMA synchronous reads them.
const (
	syncNormal = 1
	syncFull   = 2
)

// writerSynchronous reads the writer connection's synchronous level, which
// SQLite lets no one change inside a transaction: the level a batch
// committed with.
func writerSynchronous(t *testing.T, s *Store) int {
	t.Helper()
	var level int
	if err := s.wconn.QueryRowContext(context.Background(), "PRAGMA synchronous").Scan(&level); err != nil {
		t.Fatalf("PRAGMA synchronous: %v", err)
	}
	return level
}

// TestDurabilityPerBatch checks that under SurvivesProcessCrash a batch of
// counts alone commits without an fsync (synchronous=NORMAL), and a batch
// that carries anything else (a stored response, an owner's or an
// application's statement, a deletion, Health's probe) with one (FULL),
// and that under the default every batch waits for the disk.
func TestDurabilityPerBatch(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "porch.db"), Options{Options: store.Options{Durability: store.SurvivesProcessCrash}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	if _, err := s.db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	now := s.Now()
	counter := func() commit.Op {
		return commit.Op{Counter: &driver.Counter{Key: "k", State: driver.State{Start: now, Count: 1}, Window: time.Minute, Expires: now.Add(time.Minute)}}
	}
	response := func(key string) *driver.Response {
		return &driver.Response{Key: key, Digest: []byte{1}, Status: 201, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
	}
	steps := []struct {
		name  string
		batch []commit.Op
		want  int
	}{
		{"counts alone", []commit.Op{counter(), counter()}, syncNormal},
		{"a count and a response", []commit.Op{counter(), {Response: response("a")}}, syncFull},
		{"counts alone again", []commit.Op{counter()}, syncNormal},
		{"a count and an owner's write", []commit.Op{counter(), {Response: response("b"), Owner: []commit.Statement{{Query: `INSERT INTO ledger (id) VALUES ('b')`}}}}, syncFull},
		{"counts alone a third time", []commit.Op{counter()}, syncNormal},
		{"an Exec", []commit.Op{{Exec: &commit.Statement{Query: `INSERT INTO ledger (id) VALUES ('c')`}}}, syncFull},
		{"counts alone a fourth time", []commit.Op{counter()}, syncNormal},
		{"a deletion", []commit.Op{{Delete: &commit.Deletion{Key: "a", Now: now.UnixMilli()}}}, syncFull},
		{"counts alone a fifth time", []commit.Op{counter()}, syncNormal},
		{"Health's probe", []commit.Op{counter(), {Probe: true}}, syncFull},
	}
	for _, st := range steps {
		if err := s.writeBatch(st.batch); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for i := range st.batch {
			if err := st.batch[i].Failed; err != nil {
				t.Fatalf("%s: op %d failed: %v", st.name, i, err)
			}
		}
		if got := writerSynchronous(t, s); got != st.want {
			t.Errorf("%s: committed with synchronous=%d, want %d", st.name, got, st.want)
		}
	}

	d, err := Open(filepath.Join(t.TempDir(), "porch.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	if err := d.writeBatch([]commit.Op{counter()}); err != nil {
		t.Fatal(err)
	}
	if got := writerSynchronous(t, d); got != syncFull {
		t.Errorf("SurvivesPowerLoss, counts alone: committed with synchronous=%d, want %d", got, syncFull)
	}
}

func TestOpenRefusesUnknownDurability(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "porch.db"), Options{Options: store.Options{Durability: store.SurvivesProcessCrash + 1}})
	if err == nil {
		s.Close(context.Background())
		t.Fatal("Open accepted a Durability that names no level")
	}
}

// BenchmarkSetSynchronous is the cost of one change of the writer's level,
// which a batch pays when it needs another level than the batch before.
func BenchmarkSetSynchronous(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "porch.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	levels := [2]string{synchronousNormal, synchronousFull}
	for i := 0; b.Loop(); i++ {
		if err := s.setSynchronous(ctx, levels[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
