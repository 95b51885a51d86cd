package pgtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
}

// Private initializes a server in a temporary directory (initdb, trust
// authentication, no fsync) and starts it on a free loopback port; tb's
// cleanup stops it and removes its files. conf lines are appended to its
// postgresql.conf. When the server's programs are missing it skips tb, or
// fails it under EnvRequire. Like every server Programs starts, it runs as
// the postgres OS user when the test runs as root.
func Private(tb testing.TB, conf ...string) *Server {
	tb.Helper()
	p := NewPrograms(tb, "porch-pgprivate-")
	data := filepath.Join(p.Base, "data")
	p.Run(tb, "initdb", "--no-sync", "--auth=trust", "--username=postgres", "--pgdata="+data)
	p.AppendConf(tb, data, append([]string{"fsync = off", "max_connections = 50"}, conf...)...)
	pm := p.Start(tb, "private", data)
	s := &Server{DSN: pm.DSN()}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ping(ctx, s.DSN)
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-pm.Exited():
			tb.Fatalf("private postgres exited: %s\n%s", pm.ExitState(), pm.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("private postgres did not accept a connection within 60s: %v\n%s", err, pm.Log())
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
