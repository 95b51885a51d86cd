package testkit

import (
	"encoding/json"
	"net/http"
	"testing"
)

// problemContentType is RFC 9457's media type, written out rather than
// taken from porch.ProblemContentType: a change to the constant is a
// change clients see, and must fail the tests that check it.
const problemContentType = "application/problem+json"

// WantProblem checks that an answer (its status, header and body) is an
// application/problem+json refusal whose status, in the header line and
// the body alike, is status and whose type is typ. It reports every
// mismatch, and stops tb only when the body is not a problem at all.
func WantProblem(tb testing.TB, gotStatus int, header http.Header, body []byte, status int, typ string) {
	tb.Helper()
	if gotStatus != status {
		tb.Errorf("status: got %d, want %d (body %s)", gotStatus, status, body)
	}
	if ct := header.Get("Content-Type"); ct != problemContentType {
		tb.Errorf("Content-Type: got %q, want %q", ct, problemContentType)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		tb.Fatalf("problem body %q: %v", body, err)
	}
	if p.Type != typ {
		tb.Errorf("problem type: got %q, want %q", p.Type, typ)
	}
	if p.Status != status {
		tb.Errorf("problem status: got %d, want %d", p.Status, status)
	}
}
