package idem_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
)

// stall sends a keyed POST's header and the first bytes of a body it
// promised more of, sends nothing more, and returns the response the
// server answers with meanwhile (waiting at most waitLimit for it).
func stall(t *testing.T, addr, key string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: shop\r\n%s: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"sku\":", idem.Header, key)
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to a body that stalls: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	return res, body
}

// A body that stalls past the server's ReadTimeout is answered 408
// idempotency-body-timeout, whose detail is plain: the read error's text
// (read tcp 127.0.0.1:…->127.0.0.1:…: i/o timeout) names the server's
// socket addresses. Nothing is stored under the key: the client's retry
// with the whole body runs the handler.
func TestStalledBodyIsRequestTimeout(t *testing.T) {
	st := openStore(t, store.Options{})
	pool := newPool(t, porchOptions())
	var ran atomic.Int32
	m := idem.New(pool, st, idem.Options{})
	srv := httptest.NewUnstartedServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	res, body := stall(t, srv.Listener.Addr().String(), "stalled")
	if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("Content-Type") != porch.ProblemContentType {
		t.Fatalf("a body that stalls: %d %s %s, want 408 %s", res.StatusCode, res.Header.Get("Content-Type"), body, porch.ProblemContentType)
	}
	var p porch.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %s: %v", body, err)
	}
	if p.Type != idem.ProblemBodyTimeout || p.Status != http.StatusRequestTimeout {
		t.Errorf("problem: type %q status %d, want %q 408", p.Type, p.Status, idem.ProblemBodyTimeout)
	}
	for _, leak := range []string{"127.0.0.1", "tcp", "i/o timeout"} {
		if strings.Contains(p.Detail, leak) {
			t.Errorf("detail %q carries %q, want a plain one", p.Detail, leak)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"mug"}`))
	req.Header.Set(idem.Header, "stalled")
	retry, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	retry.Body.Close()
	if retry.StatusCode != http.StatusCreated || ran.Load() != 1 {
		t.Errorf("retry with the whole body: %d, handler ran %d times; want 201 from one run", retry.StatusCode, ran.Load())
	}
}
