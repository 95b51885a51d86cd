package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir finds initdb, postgres and pg_basebackup: on PATH, else in the
// newest /usr/lib/postgresql/N/bin (Debian and Ubuntu install the server's
// programs there, off PATH, with the postgresql-N package).
func BinDir() (string, error) {
	need := []string{"initdb", "postgres", "pg_basebackup"}
	has := func(dir string) bool {
		for _, p := range need {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.New("no initdb, postgres and pg_basebackup on PATH or in /usr/lib/postgresql/*/bin (install the PostgreSQL server package, e.g. postgresql on Debian/Ubuntu)")
}

// Server is a PostgreSQL server of one test's own, for a test that must
// change what the shared server (DSN) must not: its configuration, its
// life. Create it with Private.
type Server struct {
	// DSN reaches the server's postgres database as the postgres user.
	DSN string

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
}

// syncLog collects a server's output, written by exec's copying
// goroutines and read by the test.
type syncLog struct {
	mu sync.Mutex // protects b
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Private initializes a server in a temporary directory (initdb, trust
// authentication, no fsync) and starts it on a free loopback port; tb's
// cleanup stops it and removes its files. conf lines are appended to its
// postgresql.conf. When the server's programs are missing it skips tb, or
// fails it under EnvRequire. initdb and postgres refuse to run as root, so
// a test run as root runs them as the postgres OS user.
func Private(tb testing.TB, conf ...string) *Server {
	tb.Helper()
	bin, err := BinDir()
	if err != nil {
		unavailable(tb, err, os.Getenv(EnvRequire) != "")
		return nil
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root, initdb needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not tb.TempDir: its parent is root's and closed to the postgres user.
	base, err := os.MkdirTemp("", "porch-pgprivate-")
	if err != nil {
		tb.Fatalf("temp dir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(base) })
	if cred != nil {
		if err := os.Chown(base, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatalf("chown %s: %v", base, err)
		}
	}
	env := append(os.Environ(), "HOME="+base, "PGTZ=UTC")
	data := filepath.Join(base, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "--no-sync", "--auth=trust", "--username=postgres", "--pgdata="+data)
	initdb.Dir, initdb.Env = base, env
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	lines := append([]string{"fsync = off", "max_connections = 50"}, conf...)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tb.Fatalf("postgresql.conf: %v", err)
	}
	_, err = f.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	f.Close()
	if err != nil {
		tb.Fatalf("postgresql.conf: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), exited: make(chan struct{})}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+base)
	s.cmd.Dir, s.cmd.Env = base, env
	w := &syncLog{}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start postgres: %v", err)
	}
	go func() { // joined by the cleanup below
		s.cmd.Wait() //nolint:errcheck // the exit status does not matter: the test stops it
		close(s.exited)
	}()
	tb.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // it may be gone already
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill() //nolint:errcheck // it may be gone already
			<-s.exited
		}
		if tb.Failed() {
			tb.Logf("private postgres log:\n%s", w.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ping(ctx, s.DSN)
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-s.exited:
			tb.Fatalf("private postgres exited: %v\n%s", s.cmd.ProcessState, w.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("private postgres did not accept a connection within 60s: %v\n%s", err, w.String())
		}
	}
}

// Set changes one of the server's settings (ALTER SYSTEM) and has it
// reload its configuration. value is SQL, quoted as a string needs:
// Set(tb, "synchronous_standby_names", "'nobody'").
func (s *Server) Set(tb testing.TB, name, value string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		tb.Fatalf("connect to the private postgres: %v", err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`ALTER SYSTEM SET ` + name + ` = ` + value, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
}
