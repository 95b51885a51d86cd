package porch_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// waitLimit bounds every wait for something the test expects to happen; it
// is a deadline, never a sleep.
const waitLimit = 10 * time.Second

// running is an App serving on a loopback port; stop ends it.
type running struct {
	addr   string
	cancel context.CancelFunc
	done   chan error

	once sync.Once
	err  error
}

// serveApp runs app.Serve on 127.0.0.1:0 until the test stops it or ends.
func serveApp(t *testing.T, app *porch.App) *running {
	t.Helper()
	return serveOn(t, app, listen(t))
}

// listen listens on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serveOn runs app.Serve on l until the test stops it or ends.
func serveOn(t *testing.T, app *porch.App, l net.Listener) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &running{addr: l.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- app.Serve(ctx, l) }() // joined by wait
	t.Cleanup(func() {
		app.StopNow()
		s.wait(t)
	})
	return s
}

// wait returns Serve's result once it has returned, failing the test if it
// does not within waitLimit.
func (s *running) wait(t *testing.T) error {
	t.Helper()
	s.once.Do(func() {
		select {
		case s.err = <-s.done:
		case <-time.After(waitLimit):
			t.Fatalf("Serve still running %s after it was asked to stop", waitLimit)
		}
	})
	return s.err
}

// rawConn is one client connection driven by hand, so that a test can hold
// it idle, trickle a body, or watch it be closed.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// dialTLS is dial over TLS, trusting roots.
func dialTLS(t *testing.T, addr string, roots *x509.CertPool) *rawConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: waitLimit}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// send writes raw bytes, failing the test on error.
func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// response reads one response, waiting at most d.
func (c *rawConn) response(d time.Duration) (*http.Response, error) {
	c.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	res.Body.Close() // ReadResponse buffers what Close discards
	return res, nil
}

// get sends GET path on c and fails the test unless it is answered 200.
func (c *rawConn) get(t *testing.T, path string) {
	t.Helper()
	c.send(t, "GET "+path+" HTTP/1.1\r\nHost: test\r\n\r\n")
	res, err := c.response(waitLimit)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %d, want 200", path, res.StatusCode)
	}
}

// closedByServer fails unless the server closes c, with nothing more to
// read, within waitLimit.
func (c *rawConn) closedByServer(t *testing.T, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLimit))
	if b, err := c.br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: got byte %q, error %v; want it closed by the server", what, b, err)
	}
}

// pingApp is an App with GET /ping.
func pingApp() *porch.App {
	app := porch.New()
	app.Get("/ping", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("pong")) })
	return app
}

// busyApp is pingApp with GET /busy, whose handler reports on started once
// it runs, then holds its connection busy until release is closed or the
// client goes away.
func busyApp(t *testing.T) (app *porch.App, started <-chan struct{}, release func()) {
	app = pingApp()
	run := make(chan struct{}, 16)
	done := make(chan struct{})
	release = sync.OnceFunc(func() { close(done) })
	t.Cleanup(release)
	app.Get("/busy", func(w http.ResponseWriter, r *http.Request) {
		run <- struct{}{}
		select {
		case <-done:
			w.Write([]byte("done"))
		case <-r.Context().Done():
		}
	})
	return app, run, release
}

// waitStarted waits for one busy handler to start.
func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatalf("busy handler did not start within %s", waitLimit)
	}
}

// connStates records the state net/http last reported for each connection,
// by the client's address, from the ConnState hook that watchConns sets in
// App.ConfigureServer. Porch calls its own hook first, so a state seen here
// is one porch has recorded.
type connStates struct {
	mu      sync.Mutex // protects the fields below
	state   map[string]http.ConnState
	changed chan struct{} // closed and replaced on every report
}

func watchConns(app *porch.App) *connStates {
	w := &connStates{state: make(map[string]http.ConnState), changed: make(chan struct{})}
	app.ConfigureServer = func(srv *http.Server) {
		srv.ConnState = func(c net.Conn, s http.ConnState) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.state[c.RemoteAddr().String()] = s
			close(w.changed)
			w.changed = make(chan struct{})
		}
	}
	return w
}

// wait waits until the server has reported c in state s.
func (w *connStates) wait(t *testing.T, c *rawConn, s http.ConnState) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		w.mu.Lock()
		got, ok := w.state[c.LocalAddr().String()]
		changed := w.changed
		w.mu.Unlock()
		if ok && got == s {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("connection %s: server reports %v, want %v within %s", c.LocalAddr(), got, s, waitLimit)
		}
	}
}

// testCert returns a TLS certificate for 127.0.0.1 and a pool that trusts
// it: httptest's, taken from a TLS server that is closed at once.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	defer ts.Close()
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	return ts.TLS.Certificates[0], roots
}
