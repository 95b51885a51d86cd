package porch_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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

// pingApp is an App with GET /ping.
func pingApp() *porch.App {
	app := porch.New()
	app.Get("/ping", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("pong")) })
	return app
}
