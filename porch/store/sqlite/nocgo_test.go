package sqlite_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A program that imports the SQLite store, built without cgo, fails with
// one error that says why and what to use instead, not with cgo types
// missing deep inside the driver (undefined: sqlite3.SQLiteStmt). The
// program is laid over the module with go build -overlay, so nothing is
// written into the tree.
func TestBuildWithoutCgoSaysWhatToUse(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	root, err := filepath.Abs("../../..") // the module root
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "main.go")
	src := "package main\n\nimport _ \"github.com/writeonce/porch-go/porch/store/sqlite\"\n\nfunc main() {}\n"
	if err := os.WriteFile(prog, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "internal", "nocgoprobe", "main.go"): prog},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-overlay", overlayFile, "-o", os.DevNull, "./internal/nocgoprobe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("CGO_ENABLED=0 go build of a program importing porch/store/sqlite: built, want an error\n%s", out)
	}
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, "#") {
			errs = append(errs, line)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "needs_cgo") ||
		!strings.Contains(errs[0], "porch_store_memory") || !strings.Contains(errs[0], "porch_store_postgres") {
		t.Errorf("CGO_ENABLED=0 go build of a program importing porch/store/sqlite:\n%s\nwant one error saying that it needs cgo and naming porch/store/memory and porch/store/postgres", out)
	}
}
