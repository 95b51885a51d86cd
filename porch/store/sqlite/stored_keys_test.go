package sqlite_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// The stored-keys set: any stored response the set misses
// makes a replay run its side effect again.

func storeResponse(t *testing.T, s *sqlite.Store, key, body string) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve %q: %v", key, err)
	}
	if _, ok, err := r.Load(ctx); err != nil || ok {
		t.Fatalf("Load %q before Save: ok %v err %v", key, ok, err)
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte(body)}, time.Hour); err != nil {
		t.Fatalf("Save %q: %v", key, err)
	}
}

func mustReplay(t *testing.T, s *sqlite.Store, key, body string) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve %q: %v", key, err)
	}
	defer r.Release()
	res, ok, err := r.Load(ctx)
	if err != nil || !ok || string(res.Body) != body {
		t.Errorf("replay of %q: ok %v body %q err %v; want the stored %q (else the side effect runs again)", key, ok, res.Body, err, body)
	}
}

// Keys of any bytes (NUL, invalid UTF-8, long) replay after a reopen: the
// set is rebuilt from the rows' keys as the driver reads them back.
func TestStoredKeysSurviveReopenAnyBytes(t *testing.T) {
	path := dbPath(t)
	keys := []string{"plain", "a\x00b", "\x00", "\xff\xfe", "tail\x00", string(make([]byte, 3000))}
	s := openSQLite(t, path, sqlite.Options{})
	for _, k := range keys {
		storeResponse(t, s, k, "v")
	}
	for _, k := range keys {
		mustReplay(t, s, k, "v")
	}
	closeStore(t, s)
	s = openSQLite(t, path, sqlite.Options{})
	for _, k := range keys {
		mustReplay(t, s, k, "v")
	}
}

// Forget, then the same key again, then a reopen.
func TestForgetThenSaveAgain(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	s := openSQLite(t, path, sqlite.Options{})
	storeResponse(t, s, "k", "one")
	if err := s.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	storeResponse(t, s, "k", "two")
	mustReplay(t, s, "k", "two")
	closeStore(t, s)
	s = openSQLite(t, path, sqlite.Options{})
	mustReplay(t, s, "k", "two")
	if err := s.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	storeResponse(t, s, "k", "three")
	mustReplay(t, s, "k", "three")
}

// kill -9 right after Save returned: the reopened store must replay.
func TestStoredKeysAfterKill9(t *testing.T) {
	if p := os.Getenv("R19_CHILD_DB"); p != "" {
		s, err := sqlite.Open(p, sqlite.Options{})
		if err != nil {
			os.Exit(3)
		}
		ctx := context.Background()
		for _, k := range []string{"k1", "k2", "k3"} {
			r, err := s.Reserve(ctx, k)
			if err != nil {
				os.Exit(4)
			}
			if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("v")}, time.Hour); err != nil {
				os.Exit(5)
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	path := dbPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoredKeysAfterKill9$")
	cmd.Env = append(os.Environ(), "R19_CHILD_DB="+path)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("child: %v %s", err, out)
	}
	s := openSQLite(t, path, sqlite.Options{})
	for _, k := range []string{"k1", "k2", "k3"} {
		mustReplay(t, s, k, "v")
	}
}
