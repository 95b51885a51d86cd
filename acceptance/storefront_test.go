//go:build acceptance

package acceptance

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// Bounds on how long the gate waits for a process. They are deadlines, not
// sleeps: every wait returns as soon as its condition holds.
const (
	startTimeout = 30 * time.Second // until the listening line and /healthz 200
	stopTimeout  = 30 * time.Second // from a signal until the process has exited
	readyPoll    = 20 * time.Millisecond
	// maxConns is how many connections one storefront's client keeps open;
	// it must cover the largest parallel burst a leg sends.
	maxConns = 1024
)

// listeningPrefix starts the stdout line that tells the gate the address
// when -addr ends in :0 (see sample/storefront/main.go).
const listeningPrefix = "storefront: listening on "

// storefront is one running storefront process on 127.0.0.1 and a client
// for it. Create it with startStorefront; the test's cleanup kills it if the
// leg did not stop it.
type storefront struct {
	db  string // the -db file, which a restart passes again
	url string // http://127.0.0.1:PORT
	app string // its PostgreSQL application_name when started by startOnPostgres

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	stdout *stdoutWatcher
	stderr *syncBuffer
	client *http.Client
}

// newDB returns a fresh -db path in the test's temporary directory.
func newDB(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "storefront.db")
}

// startStorefront starts the storefront on db with flags (added after -addr
// and -db) and returns once it has printed its address and answers GET
// /healthz with 200.
func startStorefront(t *testing.T, db string, flags ...string) *storefront {
	t.Helper()
	s, deadline := launchStorefront(t, db, flags...)
	s.waitReady(t, deadline)
	return s
}

// launchStorefront starts the storefront as startStorefront does and
// returns once it has printed its address, ready or not, with the
// deadline for it to become ready.
func launchStorefront(t *testing.T, db string, flags ...string) (*storefront, <-chan time.Time) {
	t.Helper()
	args := append([]string{"-addr", "127.0.0.1:0", "-db", db}, flags...)
	s := &storefront{
		db:     db,
		cmd:    exec.Command(storefrontBin, args...),
		exited: make(chan struct{}),
		stdout: &stdoutWatcher{addr: make(chan string, 1)},
		stderr: &syncBuffer{},
		client: newClient(),
	}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start storefront: %v", err)
	}
	go func() { // joined by every stop, kill and the cleanup below
		s.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill() //nolint:errcheck // it may exit on its own meanwhile
			<-s.exited
		}
		if t.Failed() {
			t.Logf("storefront %s output:\n%s", strings.Join(args, " "), s.output())
		}
	})
	t.Logf("started storefront %s", strings.Join(flags, " "))

	deadline := time.After(startTimeout)
	select {
	case addr := <-s.stdout.addr:
		s.url = "http://" + addr
	case <-s.exited:
		t.Fatalf("storefront exited before listening: %v\n%s", s.cmd.ProcessState, s.output())
	case <-deadline:
		t.Fatalf("storefront printed no %q line within %s\n%s", listeningPrefix, startTimeout, s.output())
	}
	return s, deadline
}

// waitReady polls GET /healthz until it answers 200.
func (s *storefront) waitReady(t *testing.T, deadline <-chan time.Time) {
	t.Helper()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		r := s.try(http.MethodGet, "/healthz", "")
		if r.Err == nil && r.Status == http.StatusOK {
			return
		}
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("storefront exited before /healthz answered 200: %v\n%s", s.cmd.ProcessState, s.output())
		case <-deadline:
			t.Fatalf("GET /healthz not 200 within %s: last %d %v\n%s", startTimeout, r.Status, r.Err, s.output())
		}
	}
}

// stop sends SIGTERM and fails the test unless the process exits 0 in time.
func (s *storefront) stop(t *testing.T) {
	t.Helper()
	s.client.CloseIdleConnections()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	s.waitExit(t, "SIGTERM")
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("after SIGTERM: got %v, want exit status 0\n%s", s.cmd.ProcessState, s.output())
	}
}

// kill sends SIGKILL (kill -9): no shutdown code runs, so only what was
// durable before the signal survives.
func (s *storefront) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	s.waitExit(t, "SIGKILL")
	s.client.CloseIdleConnections()
	ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("after SIGKILL: got %v, want killed by SIGKILL", s.cmd.ProcessState)
	}
}

func (s *storefront) waitExit(t *testing.T, sig string) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("storefront still running %s after %s\n%s", stopTimeout, sig, s.output())
	}
}

func (s *storefront) output() string {
	return "--- stdout\n" + s.stdout.String() + "--- stderr\n" + s.stderr.String()
}

// newClient is an HTTP client that keeps enough idle connections to one
// host for the largest burst, so a warmed burst reuses open connections
// instead of queueing on a few.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
}

// reply is one HTTP exchange as the gate saw it. Err is set when no
// response arrived (a refused or reset connection, a timeout).
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

func (r reply) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// try sends one request and never fails the test, so goroutines may call
// it. header lists key, value pairs. A body is sent as application/json.
func (s *storefront) try(method, path, body string, header ...string) reply {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		return reply{Err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := s.client.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return reply{Status: res.StatusCode, Header: res.Header, Body: b, Err: err}
}

// get is try for GET that fails the test when no response arrives.
func (s *storefront) get(t *testing.T, path string, header ...string) reply {
	t.Helper()
	r := s.try(http.MethodGet, path, "", header...)
	if r.Err != nil {
		t.Fatalf("GET %s: %v", path, r.Err)
	}
	return r
}

// post is try for POST that fails the test when no response arrives.
func (s *storefront) post(t *testing.T, path, body string, header ...string) reply {
	t.Helper()
	r := s.try(http.MethodPost, path, body, header...)
	if r.Err != nil {
		t.Fatalf("POST %s: %v", path, r.Err)
	}
	return r
}

// warm opens n idle connections by sending n parallel GET /healthz, which is
// never rate limited, so that a burst after it starts on open connections and
// reaches the server together rather than spread over n TCP handshakes.
func (s *storefront) warm(t *testing.T, n int) {
	t.Helper()
	for _, r := range parallel(n, func(int) reply { return s.try(http.MethodGet, "/healthz", "") }) {
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("warm-up GET /healthz: %v", r)
		}
	}
}

// parallel runs f(0) … f(n-1) on n goroutines that all wait at a start
// barrier (a channel closed once every goroutine is running), so the calls
// overlap for real instead of trickling in as goroutines are scheduled. It
// returns the results in index order.
func parallel[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-start
			out[i] = f(i)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}

// statuses counts replies by status; a reply with no response counts as 0.
func statuses(rs []reply) map[int]int {
	m := make(map[int]int)
	for _, r := range rs {
		if r.Err != nil {
			m[0]++
			continue
		}
		m[r.Status]++
	}
	return m
}

// checkProblem fails unless r is an application/problem+json response with
// status want whose body carries a type and the same status.
func checkProblem(t *testing.T, r reply, want int) {
	t.Helper()
	if r.Status != want {
		t.Errorf("status: got %d, want %d (%s)", r.Status, want, r)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/problem+json" {
		t.Errorf("%d Content-Type: got %q, want application/problem+json", want, r.Header.Get("Content-Type"))
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("%d problem body: %v (%s)", want, err, r.Body)
		return
	}
	if p.Type == "" || p.Status != want {
		t.Errorf("%d problem body: got type %q status %d, want a type and status %d", want, p.Type, p.Status, want)
	}
}

// openDB opens the storefront's SQLite file read-only (query_only), beside a
// running storefront or after it has exited. A file left by kill -9 is
// recovered from its WAL on open, as the storefront itself would.
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_query_only=1&_busy_timeout=10000")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// counterRow is one row of porch_rate_counters. Times are Unix ms on the
// store's timeline.
type counterRow struct {
	Key         string
	WindowStart int64
	WindowMS    int64
	Count       int64
	ExpiresAt   int64
}

// counters reads every counter of path, ordered by key, through the view
// porch_rate_current: while the store runs a count lives in the hit journal,
// after a clean stop in porch_rate_counters, and the view reads both.
func counters(t *testing.T, path string) []counterRow {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	rows, err := db.Query(`SELECT key, window_start, window_ms, count, expires_at FROM porch_rate_current ORDER BY key`)
	if err != nil {
		t.Fatalf("read porch_rate_counters: %v", err)
	}
	defer rows.Close()
	var out []counterRow
	for rows.Next() {
		var c counterRow
		if err := rows.Scan(&c.Key, &c.WindowStart, &c.WindowMS, &c.Count, &c.ExpiresAt); err != nil {
			t.Fatalf("read porch_rate_counters: %v", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read porch_rate_counters: %v", err)
	}
	return out
}

// onlyCounter reads the single counter row a one-client leg leaves.
func onlyCounter(t *testing.T, path string) counterRow {
	t.Helper()
	cs := counters(t, path)
	if len(cs) != 1 {
		t.Fatalf("porch_rate_counters: got %d rows %+v, want 1", len(cs), cs)
	}
	return cs[0]
}

// rowCount counts the rows of table (a name the leg spells out, never
// input) in path.
func rowCount(t *testing.T, path, table string) int {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// stdoutWatcher is a process's stdout: it keeps everything written and
// reports the address of the storefront's listening line once.
type stdoutWatcher struct {
	addr chan string // receives the listen address, once

	mu      sync.Mutex // protects the fields below
	all     bytes.Buffer
	partial []byte // the current line, until its newline arrives
	found   bool
}

func (w *stdoutWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	if w.found {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		line, rest, ok := bytes.Cut(w.partial, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		w.partial = rest
		if addr, ok := strings.CutPrefix(string(line), listeningPrefix); ok {
			w.addr <- strings.TrimSpace(addr)
			w.found, w.partial = true, nil
			return len(p), nil
		}
	}
}

func (w *stdoutWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine exec starts and
// the test reading it.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
