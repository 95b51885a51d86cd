package porch_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// A keep-alive connection that sends nothing more is closed after
// IdleTimeout; without one, 20,000 of them exhausted the file descriptors.
func TestServeClosesIdleConnections(t *testing.T) {
	app := pingApp()
	app.IdleTimeout = 100 * time.Millisecond
	s := serveApp(t, app)

	c := dial(t, s.addr)
	c.get(t, "/ping")
	c.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after IdleTimeout: got read error %v, want io.EOF (closed by the server)", err)
	}
}

// A body that trickles is cut off by ReadTimeout: the handler's read fails
// with a deadline error instead of holding the connection forever.
func TestServeCutsSlowBody(t *testing.T) {
	app := pingApp()
	app.ReadTimeout = 100 * time.Millisecond
	readErr := make(chan error, 1)
	app.Post("/upload", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	})
	s := serveApp(t, app)

	c := dial(t, s.addr)
	c.send(t, "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc")
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("slow body: got read error %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("slow body: handler still reading after %s, want it cut off at ReadTimeout", waitLimit)
	}
}

// Beyond MaxConns, while every connection is busy with a request, a new
// one is not served until another closes; the busy ones are served as
// before.
func TestServeCapsConnections(t *testing.T) {
	app, started, release := busyApp(t)
	app.MaxConns = 2
	s := serveApp(t, app)

	a, b := dial(t, s.addr), dial(t, s.addr)
	a.send(t, "GET /busy HTTP/1.1\r\nHost: test\r\n\r\n")
	b.send(t, "GET /busy HTTP/1.1\r\nHost: test\r\n\r\n")
	waitStarted(t, started)
	waitStarted(t, started)

	c := dial(t, s.addr) // the kernel completes the handshake; porch does not accept
	c.send(t, "GET /ping HTTP/1.1\r\nHost: test\r\n\r\n")
	if res, err := c.response(200 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection at MaxConns 2, both busy: got %v %v, want no answer", res, err)
	}

	b.Close() // its handler sees the client go and returns
	res, err := c.response(waitLimit)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("third connection once one closed: got %v %v, want 200", res, err)
	}
	release()
	if res, err := a.response(waitLimit); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("busy connection: got %v %v, want 200", res, err)
	}
}

// At MaxConns, a new client is served at once by closing the connection
// idle longest: one client holding every slot with idle keep-alive
// connections (one cheap request per IdleTimeout each) must not keep others
// out. Over TLS the transport is closed under the *tls.Conn.
func TestServeClosesIdleConnectionsForNewOnes(t *testing.T) {
	cert, roots := testCert(t)
	for _, tc := range []struct {
		name   string
		listen func(net.Listener) net.Listener
		dial   func(t *testing.T, addr string) *rawConn
	}{
		{"tcp", func(l net.Listener) net.Listener { return l }, dial},
		{"tls", func(l net.Listener) net.Listener {
			return tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
		}, func(t *testing.T, addr string) *rawConn { return dialTLS(t, addr, roots) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxConns = 3
			app := pingApp()
			app.MaxConns = maxConns
			states := watchConns(app)
			s := serveOn(t, app, tc.listen(listen(t)))

			idle := make([]*rawConn, maxConns)
			for i := range idle {
				idle[i] = tc.dial(t, s.addr)
				idle[i].get(t, "/ping")
				states.wait(t, idle[i], http.StateIdle)
			}
			// Each new client takes the slot of the longest idle; it goes
			// idle itself after them, so the next takes the next one's.
			for i := range idle {
				tc.dial(t, s.addr).get(t, "/ping")
				idle[i].closedByServer(t, fmt.Sprintf("idle connection %d of %d at MaxConns, after %d new clients", i+1, maxConns, i+1))
			}
		})
	}
}

// A connection in the middle of a request is never closed to make room:
// the idle one is, and the busy one gets its answer.
func TestServeKeepsBusyConnectionsForNewOnes(t *testing.T) {
	app, started, release := busyApp(t)
	app.MaxConns = 2
	states := watchConns(app)
	s := serveApp(t, app)

	busy := dial(t, s.addr)
	busy.send(t, "GET /busy HTTP/1.1\r\nHost: test\r\n\r\n")
	waitStarted(t, started)
	idle := dial(t, s.addr)
	idle.get(t, "/ping")
	states.wait(t, idle, http.StateIdle)

	dial(t, s.addr).get(t, "/ping")
	idle.closedByServer(t, "idle connection at MaxConns after a new client")
	release()
	if res, err := busy.response(waitLimit); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("busy connection at MaxConns after a new client: got %v %v, want 200", res, err)
	}
}

// The defaults apply to an App whose options are all zero: a 100 KiB header
// is refused (net/http alone allows 1 MiB).
func TestServeDefaultsCapHeader(t *testing.T) {
	s := serveApp(t, pingApp())
	c := dial(t, s.addr)
	c.send(t, "GET /ping HTTP/1.1\r\nHost: test\r\nX-Big: "+strings.Repeat("a", 100<<10)+"\r\n\r\n")
	res, err := c.response(waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB header: got %d, want 431", res.StatusCode)
	}
}

// WriteTimeout counts for a buffered response from when porch writes it: a
// handler behind Chain that works longer than WriteTimeout still gets its
// answer to the client (http.Server.WriteTimeout alone counts from the
// request, and the finished response would be cut off).
func TestServeWriteTimeoutSparesBufferedHandler(t *testing.T) {
	const writeTimeout = 50 * time.Millisecond
	app := pingApp()
	app.WriteTimeout = writeTimeout
	app.With(porch.Chain()).Get("/work", func(w http.ResponseWriter, r *http.Request) {
		<-time.After(4 * writeTimeout) // the work outlasts the server's write deadline
		io.WriteString(w, "worked")
	})
	s := serveApp(t, app)

	res, err := http.Get("http://" + s.addr + "/work")
	if err != nil {
		t.Fatalf("GET /work after a handler longer than WriteTimeout: %v, want 200", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "worked" {
		t.Errorf("GET /work: got %d %q, want 200 \"worked\"", res.StatusCode, body)
	}
}
