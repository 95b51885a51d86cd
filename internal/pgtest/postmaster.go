package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopTimeout is how long a postmaster has to shut down on SIGQUIT before
// it is killed.
const stopTimeout = 30 * time.Second

// Programs runs PostgreSQL's server programs (found by BinDir) for one
// test, in a temporary directory of its own: the start-up that Private
// and the acceptance gate's primary and standby share. initdb and
// postgres refuse to run as root, so when the test does (as CI does)
// every program runs as the postgres OS user. Create it with NewPrograms.
type Programs struct {
	// Bin is the directory of initdb, postgres and pg_basebackup.
	Bin string
	// Base is the temporary directory for the data directories and the
	// servers' sockets, removed when the test ends.
	Base string

	cred *syscall.Credential // the postgres OS user when the test runs as root, else nil
}

// NewPrograms finds the server's programs and makes Base, named after
// prefix. When the programs are missing it skips tb, or fails it under
// EnvRequire.
func NewPrograms(tb testing.TB, prefix string) *Programs {
	tb.Helper()
	bin, err := BinDir()
	if err != nil {
		unavailable(tb, err, os.Getenv(EnvRequire) != "")
		return nil
	}
	p := &Programs{Bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root, initdb needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not tb.TempDir: its parent is root's and closed to the postgres user.
	if p.Base, err = os.MkdirTemp("", prefix); err != nil {
		tb.Fatalf("temp dir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(p.Base) })
	if p.cred != nil {
		if err := os.Chown(p.Base, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			tb.Fatalf("chown %s: %v", p.Base, err)
		}
	}
	return p
}

// env is the environment of the server programs: HOME is Base, so that
// libpq does not look for a .pgpass it may not read.
func (p *Programs) env() []string {
	return append(os.Environ(), "HOME="+p.Base, "PGTZ=UTC")
}

// command is prog with args, run in Base as the programs' user.
func (p *Programs) command(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.Bin, prog), args...)
	cmd.Dir, cmd.Env = p.Base, p.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	return cmd
}

// Run runs prog (initdb, pg_basebackup) to completion, and fails tb with
// its output if it fails.
func (p *Programs) Run(tb testing.TB, prog string, args ...string) {
	tb.Helper()
	if out, err := p.command(prog, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

// AppendConf adds lines to the postgresql.conf of the data directory
// dir, keeping its owner.
func (p *Programs) AppendConf(tb testing.TB, dir string, lines ...string) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tb.Fatalf("postgresql.conf: %v", err)
	}
	_, err = f.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	f.Close()
	if err != nil {
		tb.Fatalf("postgresql.conf: %v", err)
	}
}

// Start starts a postmaster on the data directory dir, on a free loopback
// port and with its socket in Base (not /var/run/postgresql, which the
// machine's own server may hold), and returns without waiting for it to
// accept connections. tb's cleanup stops it, and logs its output if tb
// failed; name tells servers apart in messages.
func (p *Programs) Start(tb testing.TB, name, dir string) *Postmaster {
	tb.Helper()
	s := &Postmaster{Name: name, Dir: dir, Port: freePort(tb), exited: make(chan struct{}), log: &syncLog{}}
	s.cmd = p.command("postgres", "-D", dir, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.Base)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start %s postgres: %v", name, err)
	}
	go func() { // joined by Kill, Stop and the cleanup below
		s.cmd.Wait() //nolint:errcheck // the exit status does not matter: the test stops it
		close(s.exited)
	}()
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("%s postgres (port %d) log:\n%s", name, s.Port, s.Log())
		}
	})
	return s
}

// freePort returns a loopback port nobody listened on a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Postmaster is one PostgreSQL server a test started with
// Programs.Start. Its methods are safe for concurrent use.
type Postmaster struct {
	Name string // as given to Start, for messages
	Dir  string // its data directory
	Port int    // its loopback port

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	log    *syncLog
}

// DSN reaches the server's postgres database as the postgres user.
func (s *Postmaster) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// Exited is closed once the postmaster has exited.
func (s *Postmaster) Exited() <-chan struct{} { return s.exited }

// ExitState describes how the postmaster exited, for a message; call it
// once Exited is closed.
func (s *Postmaster) ExitState() string { return fmt.Sprint(s.cmd.ProcessState) }

// Log returns what the postmaster has printed so far.
func (s *Postmaster) Log() string { return s.log.String() }

// Kill sends SIGKILL to the postmaster and waits for it to be gone: no
// shutdown runs, no WAL is sent on. Its backends and walsenders, each in a
// process group of its own, see the postmaster gone and exit at once
// (closing their clients' connections), and nothing accepts a connection
// on its port any more.
func (s *Postmaster) Kill() {
	s.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may be gone already
	<-s.exited
}

// Stop shuts the server down at once (SIGQUIT: the postmaster ends every
// child first), and kills it if that takes longer than stopTimeout, so
// that no backend outlives the test in its temporary directory.
func (s *Postmaster) Stop() {
	s.cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // it may be gone already
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.Kill()
	}
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
