package porch_test

import (
	"errors"
	"io"
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

// Beyond MaxConns a connection is not served until another closes, while
// the ones already open are served as before.
func TestServeCapsConnections(t *testing.T) {
	app := pingApp()
	app.MaxConns = 2
	s := serveApp(t, app)

	a, b := dial(t, s.addr), dial(t, s.addr)
	a.get(t, "/ping") // both are accepted and served
	b.get(t, "/ping")

	c := dial(t, s.addr) // the kernel completes the handshake; porch does not accept
	c.send(t, "GET /ping HTTP/1.1\r\nHost: test\r\n\r\n")
	if res, err := c.response(200 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection at MaxConns 2: got %v %v, want no answer", res, err)
	}
	a.get(t, "/ping") // the open ones are still served

	b.Close()
	res, err := c.response(waitLimit)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("third connection once one closed: got %v %v, want 200", res, err)
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
