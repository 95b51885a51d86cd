package porch_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

func TestUnavailableRetryAfterRoundsUpToWholeSeconds(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want int
	}{
		{"negative is at least one", -time.Second, 1},
		{"zero is at least one", 0, 1},
		{"a millisecond rounds up", time.Millisecond, 1},
		{"whole seconds stay", 2 * time.Second, 2},
		{"a fraction rounds up", 2*time.Second + time.Nanosecond, 3},
		{"a minute", time.Minute, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := porch.Unavailable("about:blank", "busy", tt.d)
			if got, want := res.Header.Get("Retry-After"), strconv.Itoa(tt.want); got != want {
				t.Errorf("Unavailable(…, %v): got Retry-After %q, want %q", tt.d, got, want)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	const typ = "https://example.test/problems/busy"
	rec := httptest.NewRecorder()
	porch.Unavailable(typ, "try later", 1500*time.Millisecond).Write(rec)

	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("got status %d, want %d", rec.Code, http.StatusServiceUnavailable)
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("got Retry-After %q, want %q", got, "2")
	}
	if got := rec.Header().Get("Content-Type"); got != porch.ProblemContentType {
		t.Errorf("got Content-Type %q, want %q", got, porch.ProblemContentType)
	}
	var p porch.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("decode problem %q: %v", rec.Body, err)
	}
	want := porch.Problem{Type: typ, Title: "Service Unavailable", Status: http.StatusServiceUnavailable, Detail: "try later"}
	if p != want {
		t.Errorf("got problem %+v, want %+v", p, want)
	}
}

func TestResponseZeroValue(t *testing.T) {
	var res porch.Response
	if got := res.StatusCode(); got != http.StatusOK {
		t.Errorf("got StatusCode %d, want %d", got, http.StatusOK)
	}
	res.SetHeader("X-A", "1") // allocates the nil header
	rec := httptest.NewRecorder()
	res.Write(rec)
	if rec.Code != http.StatusOK || rec.Header().Get("X-A") != "1" || rec.Header().Get("Content-Length") != "0" {
		t.Errorf("got %d %v, want 200 with X-A: 1 and Content-Length: 0", rec.Code, rec.Header())
	}
}

// BodyProblem tells a body that stalled past the server's ReadTimeout
// (408), one over an http.MaxBytesReader's cap (413) and any other failed
// read (400), and its detail never carries the read error's text, which
// names the server's socket addresses.
func TestBodyProblem(t *testing.T) {
	addr := func(port int) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: addr(8080), Addr: addr(51234), Err: err}
	}
	const base = "https://api.example.com/problems/"
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantType   string
	}{
		{"read deadline", opErr(os.ErrDeadlineExceeded), http.StatusRequestTimeout, base + "body-timeout"},
		{"read deadline, wrapped", fmt.Errorf("decode: %w", opErr(os.ErrDeadlineExceeded)), http.StatusRequestTimeout, base + "body-timeout"},
		{"over the cap", &http.MaxBytesError{Limit: 64}, http.StatusRequestEntityTooLarge, base + "body-too-large"},
		{"connection reset", opErr(syscall.ECONNRESET), http.StatusBadRequest, base + "body-unreadable"},
		{"short body", io.ErrUnexpectedEOF, http.StatusBadRequest, base + "body-unreadable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := porch.BodyProblem(base, tc.err)
			if p.Status != tc.wantStatus || p.Type != tc.wantType {
				t.Errorf("got %d %s, want %d %s", p.Status, p.Type, tc.wantStatus, tc.wantType)
			}
			if p.Title == "" || p.Detail == "" {
				t.Errorf("got title %q, detail %q; want both", p.Title, p.Detail)
			}
			for _, leak := range []string{"127.0.0.1", "8080", "51234", "tcp"} {
				if strings.Contains(p.Detail, leak) {
					t.Errorf("detail %q carries %q from the error, want a plain one", p.Detail, leak)
				}
			}
		})
	}
}
