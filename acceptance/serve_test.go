//go:build acceptance

package acceptance

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rawConn is one connection to a storefront driven by hand, so that a leg
// can hold it idle, trickle a body, or watch the storefront close it.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func (s *storefront) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatalf("dial storefront: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
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
	res.Body.Close()
	return res, nil
}

// get sends GET path and fails the test unless it is answered 200.
func (c *rawConn) get(t *testing.T, path string) {
	t.Helper()
	c.send(t, "GET "+path+" HTTP/1.1\r\nHost: storefront\r\n\r\n")
	res, err := c.response(stopTimeout)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %v %v, want 200", path, res, err)
	}
}

// timedOut fails unless the storefront answers c's stalled body 408
// problem+json whose detail is plain: the read's error names the server's
// socket addresses (read tcp 127.0.0.1:…->…: i/o timeout).
func (c *rawConn) timedOut(t *testing.T, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(stopTimeout))
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("%s body stalled past -read-timeout: %v, want a 408", what, err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	r := reply{Status: res.StatusCode, Header: res.Header, Body: body, Err: err}
	checkProblem(t, r, http.StatusRequestTimeout)
	for _, leak := range []string{"127.0.0.1", "tcp", "i/o timeout"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("%s body stalled past -read-timeout: %s, want no %q in it", what, body, leak)
		}
	}
}

// closedWithin reports whether the storefront has closed c, waiting at
// most d for its EOF.
func (c *rawConn) closedWithin(d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	for {
		if _, err := c.br.ReadByte(); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// closedByServer fails unless the storefront closes c within stopTimeout.
func (c *rawConn) closedByServer(t *testing.T, what string) {
	t.Helper()
	if !c.closedWithin(stopTimeout) {
		t.Fatalf("%s: still open after %s, want it closed by the storefront", what, stopTimeout)
	}
}

// slowCheckoutHead starts the body of slowCheckout's request.
const slowCheckoutHead = `{"sku":`

// slowCheckout starts a POST /checkout keyed key whose body never finishes
// (100 bytes announced, slowCheckoutHead sent), and returns once the
// storefront reads the body: it answers Expect: 100-continue only then, so
// the limiter has counted the request by the time it returns.
func (s *storefront) slowCheckout(t *testing.T, key string) *rawConn {
	t.Helper()
	c := s.dial(t)
	c.send(t, "POST /checkout HTTP/1.1\r\nHost: storefront\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: "+key+"\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")
	res, err := c.response(stopTimeout)
	if err != nil || res.StatusCode != http.StatusContinue {
		t.Fatalf("slow checkout: got %v %v, want 100 Continue", res, err)
	}
	c.send(t, slowCheckoutHead) // and nothing more
	return c
}

// signal sends sig to the storefront.
func (s *storefront) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", sig, err)
	}
}

// waitLog waits until the storefront's stderr contains line.
func (s *storefront) waitLog(t *testing.T, line string) {
	t.Helper()
	deadline := time.After(stopTimeout)
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for !strings.Contains(s.stderr.String(), line) {
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("storefront exited before logging %q\n%s", line, s.output())
		case <-deadline:
			t.Fatalf("storefront did not log %q within %s\n%s", line, stopTimeout, s.output())
		}
	}
}

// exitWithin fails unless the storefront exits with status 0 within d of
// start.
func (s *storefront) exitWithin(t *testing.T, start time.Time, d time.Duration, what string) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(d - time.Since(start)):
		t.Fatalf("%s: still running after %s\n%s", what, d, s.output())
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s: got %v, want exit status 0\n%s", what, s.cmd.ProcessState, s.output())
	}
	t.Logf("%s: exit 0 after %s", what, time.Since(start).Round(time.Millisecond))
}

// Unrouted requests get problem+json; HEAD is served wherever GET is, and
// is rate limited like GET: it runs the same handler, so it costs the same.
func TestServeUnroutedAndHead(t *testing.T) {
	t.Parallel()
	const limit = 5
	s := startStorefront(t, newDB(t), "-rate-limit", strconv.Itoa(limit), "-rate-window", "1h")

	checkProblem(t, s.get(t, "/nope"), http.StatusNotFound)
	r := s.try(http.MethodDelete, limited, "")
	if r.Err != nil {
		t.Fatalf("DELETE %s: %v", limited, r.Err)
	}
	checkProblem(t, r, http.StatusMethodNotAllowed)
	if got, want := r.Header.Get("Allow"), "GET, HEAD"; got != want {
		t.Errorf("405 Allow: got %q, want %q", got, want)
	}

	head := s.try(http.MethodHead, limited, "")
	if head.Err != nil || head.Status != http.StatusOK || len(head.Body) != 0 {
		t.Fatalf("HEAD %s: got %v with %d body bytes, want 200 and no body", limited, head, len(head.Body))
	}
	if h := checkRate(t, head, limit, time.Hour); h.Remaining != limit-1 {
		t.Errorf("HEAD X-RateLimit-Remaining: got %d, want %d (counted)", h.Remaining, limit-1)
	}
	if h := checkRate(t, s.get(t, limited), limit, time.Hour); h.Remaining != limit-2 {
		t.Errorf("GET after HEAD X-RateLimit-Remaining: got %d, want %d (one count for both)", h.Remaining, limit-2)
	}
}

// -idle-timeout, -read-timeout and -max-header-bytes reach the server: an
// idle keep-alive connection is closed, a trickling upload is answered 408
// (with a detail that names no socket address) and closed, an oversized
// header is refused.
func TestServeTimeouts(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-idle-timeout", "300ms", "-read-timeout", "300ms", "-max-header-bytes", "4096")

	t.Run("idle connection", func(t *testing.T) {
		c := s.dial(t)
		c.get(t, "/healthz")
		c.closedByServer(t, "idle keep-alive connection after -idle-timeout")
	})
	t.Run("slow body", func(t *testing.T) {
		c := s.slowCheckout(t, "slow-body")
		c.timedOut(t, "checkout")
		c.closedByServer(t, "upload trickling past -read-timeout")
	})
	t.Run("slow login body", func(t *testing.T) {
		c := s.dial(t)
		c.send(t, "POST /login HTTP/1.1\r\nHost: storefront\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100\r\n\r\n{\"user\":") // and nothing more
		c.timedOut(t, "login")
		c.closedByServer(t, "login body trickling past -read-timeout")
	})
	t.Run("large header", func(t *testing.T) {
		r := s.get(t, "/healthz", "X-Big", strings.Repeat("a", 16<<10))
		if r.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KiB header at -max-header-bytes 4096: got %s, want 431", r)
		}
	})
}

// -max-conns with every connection busy: a connection beyond the cap is not
// served until one closes, while those open are served as before.
func TestServeMaxConns(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-max-conns", "2")
	s.client.CloseIdleConnections() // the readiness probe's connection

	a, b := s.slowCheckout(t, "busy-a"), s.slowCheckout(t, "busy-b")
	c := s.dial(t)
	c.send(t, "GET /healthz HTTP/1.1\r\nHost: storefront\r\n\r\n")
	if res, err := c.response(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection at -max-conns 2, both busy: got %v %v, want no answer", res, err)
	}
	b.Close()
	if res, err := c.response(stopTimeout); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("third connection once one closed: got %v %v, want 200", res, err)
	}
	body := `"nope","qty":1}`
	a.send(t, body+strings.Repeat(" ", 100-len(slowCheckoutHead)-len(body)))
	if _, err := a.response(stopTimeout); err != nil {
		t.Fatalf("busy connection once its upload finished: got %v, want an answer", err)
	}
}

// -max-conns held by one client with idle keep-alive connections (each
// needs one cheap request per -idle-timeout to stay open): a new client is
// still answered at once, and a connection idle longest is closed to make
// room. Once, every new client waited for an idle one to time out (60 s).
//
// Which of the oldest connections goes first can differ by one: net/http
// marks a connection idle only after writing its response, so under load
// the client may have read idle[i]'s answer and been served on idle[i+1]
// before idle[i] counts as idle. So the test asks that the clients' slots
// came from the clients+1 connections idle longest, one each, and that every
// younger connection is served as before.
func TestServeMaxConnsClosesIdleForNewClients(t *testing.T) {
	t.Parallel()
	const conns, clients = 20, 3
	const answerWithin = 10 * time.Second // far below the 60 s of -idle-timeout
	s := startStorefront(t, newDB(t), "-max-conns", strconv.Itoa(conns))
	s.client.CloseIdleConnections() // the readiness probe's connection

	idle := make([]*rawConn, conns)
	for i := range idle {
		idle[i] = s.dial(t)
		idle[i].get(t, "/healthz")
	}
	for i := range clients {
		start := time.Now()
		c := s.dial(t)
		c.send(t, "GET /healthz HTTP/1.1\r\nHost: storefront\r\n\r\n")
		res, err := c.response(answerWithin)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("new client %d with %d idle connections at -max-conns %d: got %v %v after %s, want 200 within %s",
				i+1, conns, conns, res, err, time.Since(start).Round(time.Millisecond), answerWithin)
		}
	}
	// A connection closed to make room was closed before its successor's
	// response was written, so its EOF is already here: the wait below is
	// spent only on the one oldest connection left open.
	var closed []int
	for i, c := range idle[:clients+1] {
		if c.closedWithin(time.Second) {
			closed = append(closed, i)
		}
	}
	if len(closed) != clients {
		t.Fatalf("%d new clients at -max-conns %d: closed idle connections %v of the %d oldest, want %d of them",
			clients, conns, closed, clients+1, clients)
	}
	for _, c := range idle[clients+1:] {
		c.get(t, "/healthz") // the others are served as before
	}
}

// SIGTERM with an upload that never finishes: the drain ends at
// -drain-timeout, the connection is closed, and the limiter still writes
// its exact count (once: 30 s, exit 1, and the stored count ahead of the
// true one, because the closers got the drain's expired context).
func TestServeSIGTERMWithSlowBody(t *testing.T) {
	t.Parallel()
	const gets, drain = 3, time.Second
	s := startStorefront(t, newDB(t), "-rate-window", "1h", "-drain-timeout", drain.String())
	for range gets {
		if r := s.get(t, limited); r.Status != http.StatusOK {
			t.Fatalf("GET %s: got %s, want 200", limited, r)
		}
	}
	s.slowCheckout(t, "slow-body")
	s.client.CloseIdleConnections()

	start := time.Now()
	s.signal(t, syscall.SIGTERM)
	s.exitWithin(t, start, drain+10*time.Second, "SIGTERM with a slow upload open")
	if c := onlyCounter(t, s.db); c.Count != gets+1 {
		t.Errorf("counter row: got count %d, want %d (%d GETs and the upload)", c.Count, gets+1, gets)
	}
}

// A second SIGTERM during a long drain stops at once, and still flushes the
// limiter's exact count.
func TestServeSecondSIGTERMStopsAtOnce(t *testing.T) {
	t.Parallel()
	const gets = 3
	s := startStorefront(t, newDB(t), "-rate-window", "1h", "-drain-timeout", "10m")
	for range gets {
		if r := s.get(t, limited); r.Status != http.StatusOK {
			t.Fatalf("GET %s: got %s, want 200", limited, r)
		}
	}
	s.slowCheckout(t, "slow-body")
	s.client.CloseIdleConnections()

	s.signal(t, syscall.SIGTERM)
	s.waitLog(t, "porch: draining")
	start := time.Now()
	s.signal(t, syscall.SIGTERM)
	s.exitWithin(t, start, 10*time.Second, "second SIGTERM during a 10m drain")
	if c := onlyCounter(t, s.db); c.Count != gets+1 {
		t.Errorf("counter row: got count %d, want %d (%d GETs and the upload)", c.Count, gets+1, gets)
	}
}
