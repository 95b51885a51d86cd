//go:build acceptance

package acceptance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second storefront on the database of a running one, by any name of the
// file, exits non-zero at start with an error naming the name it was given
// and the file the first one holds; the first keeps serving. A lock keyed by
// the path string let a symlink or a hard link start: every limit then
// multiplied, and a hard link gave SQLite a second WAL and lost orders.
func TestSecondStorefrontOnOneFileRefused(t *testing.T) {
	t.Parallel()
	first := startStorefront(t, newDB(t))
	held, err := filepath.EvalSymlinks(first.db) // the name /proc reports for the holder
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	symlink, hardlink := filepath.Join(dir, "symlink.db"), filepath.Join(dir, "hardlink.db")
	linkedDir := filepath.Join(dir, "linked-dir")
	if err := os.Symlink(first.db, symlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(first.db, hardlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(first.db), linkedDir); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, db string }{
		{"same path", first.db},
		{"symlink", symlink},
		{"hard link", hardlink},
		{"through a symlinked directory", filepath.Join(linkedDir, filepath.Base(first.db))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := refusedStart(t, tc.db)
			if !strings.Contains(out, tc.db) || !strings.Contains(out, held) {
				t.Errorf("output: want it to name %s and %s\n%s", tc.db, held, out)
			}
		})
	}
	if r := first.get(t, "/healthz"); r.Status != 200 {
		t.Errorf("the first storefront after the refusals: GET /healthz got %s, want 200", r)
	}
	first.stop(t)
}

// refusedStart starts a storefront on db and returns its output once it has
// exited non-zero; it fails the test if the storefront listens instead.
func refusedStart(t *testing.T, db string) string {
	t.Helper()
	s := &storefront{
		db:     db,
		cmd:    exec.Command(storefrontBin, "-addr", "127.0.0.1:0", "-db", db),
		exited: make(chan struct{}),
		stdout: &stdoutWatcher{addr: make(chan string, 1)},
		stderr: &syncBuffer{},
	}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start storefront: %v", err)
	}
	go func() { // joined below, in every branch
		s.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(s.exited)
	}()
	select {
	case <-s.exited:
	case addr := <-s.stdout.addr:
		s.cmd.Process.Kill() //nolint:errcheck // it may exit on its own meanwhile
		<-s.exited
		t.Fatalf("storefront -db %s: got it listening on %s beside the running one, want it refused\n%s", db, addr, s.output())
	case <-time.After(startTimeout):
		s.cmd.Process.Kill() //nolint:errcheck // it may exit on its own meanwhile
		<-s.exited
		t.Fatalf("storefront -db %s: neither listening nor exited within %s\n%s", db, startTimeout, s.output())
	}
	if s.cmd.ProcessState.ExitCode() == 0 {
		t.Errorf("storefront -db %s: got exit status 0, want non-zero\n%s", db, s.output())
	}
	return s.output()
}
