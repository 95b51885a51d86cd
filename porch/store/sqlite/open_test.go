//go:build unix

package sqlite_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mattn/go-sqlite3"

	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A store that cannot start says which file and what to do; SQLite's own
// words ("attempt to write a readonly database" at "read schema version")
// name neither. Every case is one a root test can really produce: root
// ignores permission bits, so the read-only directory is an immutable one.
func TestOpenSQLiteErrorsNameThePathAndWhatToDo(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, dir string) string // returns the path to open
		cause    func(err error) bool
		wantHint string
	}{
		{
			name:     "path is a directory",
			setup:    func(t *testing.T, dir string) string { return dir },
			cause:    func(err error) bool { return errors.Is(err, syscall.EISDIR) },
			wantHint: "is a directory; name a database file",
		},
		{
			name: "parent is a file",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "file"), []byte("x"))
				return filepath.Join(dir, "file", "porch.db")
			},
			cause:    func(err error) bool { return errors.Is(err, syscall.ENOTDIR) },
			wantHint: "is not a directory",
		},
		{
			name:     "parent missing",
			setup:    func(t *testing.T, dir string) string { return filepath.Join(dir, "missing", "porch.db") },
			cause:    func(err error) bool { return errors.Is(err, fs.ErrNotExist) },
			wantHint: "does not exist; create it",
		},
		{
			name:     "not a regular file",
			setup:    func(t *testing.T, dir string) string { return os.DevNull },
			cause:    func(err error) bool { return err != nil },
			wantHint: "not a regular file",
		},
		{
			name: "garbage bytes",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "porch.db")
				writeFile(t, path, []byte(strings.Repeat("not a database ", 1000)))
				return path
			},
			cause:    sqliteCode(sqlite3.ErrNotADB),
			wantHint: "restore it from a backup",
		},
		{
			name: "damaged database",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "porch.db")
				closeStore(t, openSQLite(t, path, sqlite.Options{}))
				damage(t, path)
				return path
			},
			cause:    sqliteCode(sqlite3.ErrCorrupt),
			wantHint: "restore it from a backup",
		},
		{
			name: "the -shm cannot be written",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "porch.db")
				if err := os.Mkdir(path+"-shm", 0o755); err != nil {
					t.Fatal(err)
				}
				return path
			},
			cause:    sqliteCode(sqlite3.ErrReadonly),
			wantHint: "make the file and the directory",
		},
		{
			name: "read-only directory",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, "porch.db")
				closeStore(t, openSQLite(t, path, sqlite.Options{}))
				immutable(t, dir)
				return path
			},
			cause:    sqliteCode(sqlite3.ErrCantOpen),
			wantHint: "make the file and the directory",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t, t.TempDir())
			s, err := sqlite.Open(path, sqlite.Options{})
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("OpenSQLite(%s): got a store, want an error", path)
			}
			if !tc.cause(err) {
				t.Errorf("OpenSQLite(%s): got %v, want its cause wrapped", path, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "open "+path+": ") || !strings.Contains(msg, tc.wantHint) {
				t.Errorf("error %q: want it to name %s and say %q", msg, path, tc.wantHint)
			}
		})
	}
}

func sqliteCode(code sqlite3.ErrNo) func(error) bool {
	return func(err error) bool {
		var se sqlite3.Error
		return errors.As(err, &se) && se.Code == code
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// damage overwrites everything after the 100-byte header of the database's
// first page, where SQLite keeps its schema.
func damage(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 4096-100)), 100); err != nil {
		t.Fatal(err)
	}
}

// immutable makes dir read-only even to root, which ignores permission bits,
// with chattr +i, and skips the test where the file system or the
// process's capabilities do not allow it.
func immutable(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s", dir, err, out)
	}
	t.Cleanup(func() { // before t.TempDir's removal, registered earlier
		if out, err := exec.Command("chattr", "-i", dir).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v %s", dir, err, out)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); err == nil {
		t.Skipf("chattr +i %s: the directory is still writable", dir)
	}
}
