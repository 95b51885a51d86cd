package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// openInternal opens a store whose applications' statements have no
// ExecBudget, for tests of what a batch does with its writes: under the
// default 50ms a loaded machine (-race beside busy loops) ran a one-row
// INSERT past its budget, failing or deferring a write the test meant to
// commit. The budget's own tests set theirs.
func openInternal(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{ExecBudget: -1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	for i := range 3 { // create, then reopen twice: migrations must run once
		s := openInternal(t, path)
		var version int
		if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
			t.Fatal(err)
		}
		if version != len(sqliteMigrations) {
			t.Errorf("open %d: got user_version %d, want %d (one per migration)", i+1, version, len(sqliteMigrations))
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatalf("open %d: close: %v", i+1, err)
		}
	}
}

func TestWriterIsDurable(t *testing.T) {
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	tests := []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"synchronous", "2"}, // FULL: a commit is on disk before done runs
	}
	for _, tt := range tests {
		t.Run(tt.pragma, func(t *testing.T) {
			var got string
			// The committer's own connection is the one that must be durable.
			if err := s.wconn.QueryRowContext(context.Background(), "PRAGMA "+tt.pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if !strings.EqualFold(got, tt.want) {
				t.Errorf("got %s = %s on the writer, want %s", tt.pragma, got, tt.want)
			}
		})
	}
}
