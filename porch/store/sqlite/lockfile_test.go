//go:build unix

package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// names makes each kind of second name for the database file at path: a
// lock keyed by the path string is fooled by all but the first.
func names(t *testing.T, path string) []struct{ name, path string } {
	t.Helper()
	dir := t.TempDir()
	symlink := filepath.Join(dir, "symlink.db")
	hardlink := filepath.Join(dir, "hardlink.db")
	linkedDir := filepath.Join(dir, "linked-dir")
	for _, err := range []error{
		os.Symlink(path, symlink),
		os.Link(path, hardlink),
		os.Symlink(filepath.Dir(path), linkedDir),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return []struct{ name, path string }{
		{"same path", path},
		{"symlink", symlink},
		{"hard link", hardlink},
		{"through a symlinked directory", filepath.Join(linkedDir, filepath.Base(path))},
	}
}

// A second opener of the same file would be a second writer of its counters
// and multiply every limit; by any name of the file, it is refused until the
// first closes, and told which file holds it.
func TestOpenSQLiteRefusesASecondOpener(t *testing.T) {
	path := dbPath(t)
	first, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	second := names(t, path)
	for _, tc := range second {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlite.Open(tc.path, sqlite.Options{})
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("OpenSQLite(%s) beside an open %s: got a store, want ErrLocked", tc.path, path)
			}
			if !errors.Is(err, sqlite.ErrLocked) {
				t.Fatalf("OpenSQLite(%s): got %v, want ErrLocked", tc.path, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.path) || !strings.Contains(msg, path) {
				t.Errorf("error %q: want it to name both %s and %s", msg, tc.path, path)
			}
		})
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range second {
		again, err := sqlite.Open(tc.path, sqlite.Options{})
		if err != nil {
			t.Fatalf("OpenSQLite(%s) after the first closed: %v", tc.path, err)
		}
		closeStore(t, again)
	}
}

// holderEnv names the file TestLockHolderProcess holds.
const holderEnv = "PORCH_TEST_LOCK_HOLDER"

// TestLockHolderProcess is not a test of its own: it is the other process
// of TestOpenSQLiteRefusesAnotherProcess, which runs this test binary with
// holderEnv set. It holds the database open until its stdin closes.
func TestLockHolderProcess(t *testing.T) {
	path := os.Getenv(holderEnv)
	if path == "" {
		return
	}
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // EOF or an error both mean stop
	s.Close(context.Background())
	os.Exit(0)
}

// Another process on any name of the file is refused, with an error that
// names the path it opened and, on Linux, the path the holder opened and
// its pid.
func TestOpenSQLiteRefusesAnotherProcess(t *testing.T) {
	path := dbPath(t)
	holder := exec.Command(os.Args[0], "-test.run=^TestLockHolderProcess$")
	holder.Env = append(os.Environ(), holderEnv+"="+path)
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); holder.Wait() }) //nolint:errcheck // it exits on EOF
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("holder process: got %q (%v), want ready", line, err)
	}
	real, err := filepath.EvalSymlinks(path) // what /proc says the holder opened
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range names(t, path) {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlite.Open(tc.path, sqlite.Options{})
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("OpenSQLite(%s) while another process holds %s: got a store, want ErrLocked", tc.path, path)
			}
			if !errors.Is(err, sqlite.ErrLocked) {
				t.Fatalf("OpenSQLite(%s): got %v, want ErrLocked", tc.path, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.path) {
				t.Errorf("error %q: want it to name %s", msg, tc.path)
			}
			if runtime.GOOS != "linux" {
				return
			}
			if pid := fmt.Sprintf("process %d", holder.Process.Pid); !strings.Contains(msg, real) || !strings.Contains(msg, pid) {
				t.Errorf("error %q: want it to name the holder's %s and %s", msg, real, pid)
			}
		})
	}
}
