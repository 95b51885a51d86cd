//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// pgCluster is a PostgreSQL primary and a hot standby the gate starts for
// itself (initdb, pg_basebackup -R) in a temporary directory, on loopback
// ports of their own, so that a leg can kill the primary and promote the
// standby without touching the server other legs share. The standby
// streams through a pgProxy, so a leg can cut replication while the
// primary lives. Create it with startPGCluster; the test's cleanup kills
// both servers and removes their files.
type pgCluster struct {
	bin  string              // the directory of initdb, postgres and pg_basebackup
	base string              // the temporary directory holding both data directories and their sockets
	cred *syscall.Credential // the postgres OS user when the gate runs as root, else nil

	primary, standby *pgServer
	link             *pgProxy // the standby's replication connection to the primary
}

// pgServer is one postmaster the gate started.
type pgServer struct {
	name   string
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	log    *syncBuffer
}

// dsn is a DSN for this server alone, as the gate's own reads use.
func (s *pgServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// freePort returns a loopback port nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startPGCluster initializes a primary, takes a base backup of it through a
// relay and starts the standby on it, and returns once the standby streams.
// With sync the primary names every standby synchronous
// (synchronous_standby_names = '*'): a commit is answered only once the
// standby has flushed its WAL. Without it the standby is asynchronous.
//
// initdb and postgres refuse to run as root, so when the gate does (as CI
// does) every server program runs as the postgres OS user.
func startPGCluster(t *testing.T, sync bool) *pgCluster {
	t.Helper()
	bin, err := pgtest.BinDir()
	if err != nil {
		if os.Getenv(pgtest.EnvRequire) != "" {
			t.Fatalf("postgres required (%s is set) but unavailable: %v", pgtest.EnvRequire, err)
		}
		t.Skipf("no postgres: %v", err)
	}
	c := &pgCluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, initdb needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parent is root's and closed to the postgres user.
	if c.base, err = os.MkdirTemp("", "porch-pgha-"); err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(c.base) })
	if c.cred != nil {
		if err := os.Chown(c.base, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("chown %s: %v", c.base, err)
		}
	}

	primary := filepath.Join(c.base, "primary")
	c.run(t, "initdb", "--no-sync", "--auth=trust", "--username=postgres", "--pgdata="+primary)
	// initdb's pg_hba.conf already trusts replication from 127.0.0.1.
	conf := "wal_level = replica\nmax_wal_senders = 4\n"
	if sync {
		conf += "synchronous_standby_names = '*'\n"
	}
	c.appendConf(t, primary, conf)
	c.primary = c.start(t, "primary", primary)
	c.waitAccepts(t, c.primary)

	c.link, _ = startPGProxy(t, c.primary.dsn())
	_, linkPort, _ := net.SplitHostPort(c.link.ln.Addr().String())
	standby := filepath.Join(c.base, "standby")
	// -R writes primary_conninfo (through the relay) and standby.signal; the
	// primary's postgresql.conf, synchronous_standby_names included, comes
	// along as a real base backup's would.
	c.run(t, "pg_basebackup", "--no-sync", "--checkpoint=fast", "--wal-method=stream", "--write-recovery-conf",
		"--host=127.0.0.1", "--port="+linkPort, "--username=postgres", "--pgdata="+standby)
	c.standby = c.start(t, "standby", standby)
	c.waitAccepts(t, c.standby)
	state := "async"
	if sync {
		state = "sync"
	}
	waitFor(t, 30*time.Second, "the standby streams from the primary as "+state, func() bool {
		var n int
		c.query(t, c.primary, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, []any{state}, &n)
		return n == 1
	})
	return c
}

// env is the environment of the server programs: HOME is the cluster's
// directory, so that libpq does not look for a .pgpass it may not read.
func (c *pgCluster) env() []string {
	return append(os.Environ(), "HOME="+c.base, "PGTZ=UTC")
}

// run runs one of the cluster's programs to completion.
func (c *pgCluster) run(t *testing.T, prog string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, prog), args...)
	cmd.Dir, cmd.Env = c.base, c.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

// appendConf adds lines to dir's postgresql.conf, keeping its owner.
func (c *pgCluster) appendConf(t *testing.T, dir, lines string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("postgresql.conf: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + lines); err != nil {
		t.Fatalf("postgresql.conf: %v", err)
	}
}

// start starts a postmaster on dir, on a free loopback port and with its
// socket in the cluster's directory (not /var/run/postgresql, which the
// machine's own server may hold).
func (c *pgCluster) start(t *testing.T, name, dir string) *pgServer {
	t.Helper()
	s := &pgServer{name: name, dir: dir, port: freePort(t), exited: make(chan struct{}), log: &syncBuffer{}}
	s.cmd = exec.Command(filepath.Join(c.bin, "postgres"), "-D", dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.base)
	s.cmd.Dir, s.cmd.Env = c.base, c.env()
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s postgres: %v", name, err)
	}
	go func() { // joined by kill and the cleanup below
		s.cmd.Wait() //nolint:errcheck // the exit status does not matter: the gate only kills it
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("%s postgres (port %d) log:\n%s", name, s.port, s.log.String())
		}
	})
	return s
}

// kill sends SIGKILL to the postmaster and waits for it to be gone: no
// shutdown runs, no WAL is sent on. Its backends and walsenders, each in a
// process group of its own, see the postmaster gone and exit at once
// (closing their clients' connections), and nothing accepts a connection
// on its port any more.
func (s *pgServer) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may be gone already
	<-s.exited
}

// stop shuts the server down at once (SIGQUIT: the postmaster ends every
// child first), and kills it if that takes longer than stopTimeout, so
// that no backend outlives the test in its temporary directory.
func (s *pgServer) stop() {
	s.cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // it may be gone already
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.kill()
	}
}

// waitAccepts polls until s takes a connection (a standby once it is
// consistent enough for hot standby queries).
func (c *pgCluster) waitAccepts(t *testing.T, s *pgServer) {
	t.Helper()
	waitFor(t, 30*time.Second, s.name+" postgres accepts connections", func() bool {
		select {
		case <-s.exited:
			t.Fatalf("%s postgres exited: %v\n%s", s.name, s.cmd.ProcessState, s.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.dsn())
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	})
}

// query runs one statement on s alone and scans its single row into dest.
func (c *pgCluster) query(t *testing.T, s *pgServer, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn())
	if err != nil {
		t.Fatalf("connect to %s: %v", s.name, err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %s: %v", s.name, sql, err)
		}
		return
	}
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %s: %v", s.name, sql, err)
	}
}

// multiHostDSN lists the primary, then the standby, and asks for the one
// that takes writes: pgx tries them in order and skips a server that is
// down or read-only, so a pool finds the promoted standby by itself.
func (c *pgCluster) multiHostDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&pool_max_conns=8",
		c.primary.port, c.standby.port)
}

// caughtUp polls until the standby has replayed everything the primary has
// written so far.
func (c *pgCluster) caughtUp(t *testing.T) {
	t.Helper()
	var lsn string
	c.query(t, c.primary, `SELECT pg_current_wal_lsn()::text`, nil, &lsn)
	waitFor(t, 30*time.Second, "the standby replays the primary's WAL up to "+lsn, func() bool {
		var ok bool
		c.query(t, c.standby, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, []any{lsn}, &ok)
		return ok
	})
}

// failOver does what an HA manager does once the primary is gone: it clears
// synchronous_standby_names on the standby (no standby is left to confirm
// a commit, so with it set every write on the promoted server would wait
// forever), then promotes it and waits until it takes writes.
func (c *pgCluster) failOver(t *testing.T) {
	t.Helper()
	c.query(t, c.standby, `ALTER SYSTEM SET synchronous_standby_names = ''`, nil)
	c.query(t, c.standby, `SELECT pg_reload_conf()`, nil)
	var promoted bool
	c.query(t, c.standby, `SELECT pg_promote(true, 30)`, nil, &promoted)
	if !promoted {
		t.Fatalf("pg_promote: the standby was not promoted within 30s")
	}
}
