//go:build unix

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Once the database file or its WAL loses its name, SQLite goes on writing
// into the nameless file and reports success, and a crash then loses every
// write acknowledged since. Every write must fail closed instead, and
// Health must say so: before, /healthz said 200 and checkouts got 201 after
// `rm porch.db-wal`, and a restart had none of them.
func TestWritesFailOnceTheFilesAreGone(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(t *testing.T, path string)
	}{
		{"WAL deleted", func(t *testing.T, path string) { remove(t, path+"-wal") }},
		{"database deleted", func(t *testing.T, path string) { remove(t, path) }},
		{"database replaced", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other.db")
			if err := os.WriteFile(other, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := dbPath(t)
			s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
			c := driver.Counter{Key: "k", State: driver.State{Start: wall0, Count: 1}, Window: time.Minute}
			if err := saveCounter(t, s, c); err != nil {
				t.Fatalf("write before: %v", err)
			}
			tc.breakIt(t, path)
			c.Count = 2
			if err := saveCounter(t, s, c); !errors.Is(err, sqlite.ErrFileGone) {
				t.Fatalf("write after: got %v, want ErrFileGone", err)
			}
			if err := s.Health(context.Background()); !errors.Is(err, sqlite.ErrFileGone) {
				t.Fatalf("Health: got %v, want ErrFileGone", err)
			}
		})
	}
}

func remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

// An empty path is refused as such, not reported as a missing directory.
func TestOpenEmptyPath(t *testing.T) {
	if _, err := sqlite.Open("", sqlite.Options{}); err == nil || !strings.Contains(err.Error(), "path is empty") {
		t.Fatalf("Open(\"\"): got %v, want an error saying the path is empty", err)
	}
}

// A response the store cannot save (here a planted trigger; in life a full
// disk or an I/O error) fails its batch, so Health reports it: failed alone
// inside the owner's savepoint, the batch committed and /healthz said 200
// while every checkout got 503.
func TestUnsavableResponseFailsHealth(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	if _, err := s.DB().Exec(`CREATE TABLE ledger (id TEXT PRIMARY KEY);
		CREATE TRIGGER boom BEFORE INSERT ON porch_idem_responses BEGIN SELECT RAISE(ABORT, 'planted'); END`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hold, err := s.Reserve(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Exec(ctx, `INSERT INTO ledger (id) VALUES ('x')`); err != nil {
		t.Fatal(err)
	}
	err = hold.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201}, time.Hour)
	if err == nil || errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("Save: got %v, want the store's failure (not the owner's ErrWriteFailed)", err)
	}
	if err := s.Health(ctx); err == nil {
		t.Fatal("Health after a response could not be saved: got nil, want an error")
	}
}

// A store opened by a symlink's name, or by a relative path the process
// later leaves with chdir, is healthy: the files are watched by the name
// SQLite resolved. Watched by the name given, every write failed with
// ErrFileGone, since SQLite keeps the WAL beside the real file.
func TestWatchedFilesFollowSQLitesName(t *testing.T) {
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		real := filepath.Join(dir, "real.db")
		if err := os.WriteFile(real, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link.db")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		s := openSQLite(t, link, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
		if err := saveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: wall0, Count: 1}, Window: time.Minute}); err != nil {
			t.Fatalf("write through a symlink: %v", err)
		}
	})
	t.Run("relative path, then chdir", func(t *testing.T) {
		t.Chdir(t.TempDir())
		s := openSQLite(t, "rel.db", sqlite.Options{Options: store.Options{Clock: fakeClock()}})
		t.Chdir(t.TempDir())
		if err := saveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: wall0, Count: 1}, Window: time.Minute}); err != nil {
			t.Fatalf("write after chdir: %v", err)
		}
	})
}
