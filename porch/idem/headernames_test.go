package idem_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// KeyHeader and ReplayedHeader rename the key's request header and the
// replay marker: the key is read from the one named and only from it, and
// a replay is marked with the other alone.
func TestHeaderNames(t *testing.T) {
	o := &orders{}
	e := newEnv(t, envConfig{opt: idem.Options{RequireKey: true,
		KeyHeader: "x-idempotency-key", ReplayedHeader: "Idempotent-Replayed"}}, o)
	post := func(header, key string) result {
		req := keyed("one")
		req.Header.Set(header, key)
		return e.serve(req)
	}
	first := post("X-Idempotency-Key", "k")
	if first.status != http.StatusCreated {
		t.Fatalf("first: got %s, want 201", first)
	}
	again := post("X-Idempotency-Key", "k")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" ||
		again.header.Get(idem.ReplayedHeader) != "" {
		t.Errorf("retry: got %s with headers %v, want a replay marked Idempotent-Replayed: true alone", again, again.header)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}
	// The draft's header is not the key's any more: the request has none.
	got := post(idem.Header, "k")
	wantProblem(t, got, http.StatusBadRequest, idem.ProblemKeyRequired)
	if !strings.Contains(string(got.body), "X-Idempotency-Key") {
		t.Errorf("problem: got %s, want it to name X-Idempotency-Key", got.body)
	}
	got = post("X-Idempotency-Key", "")
	wantProblem(t, got, http.StatusBadRequest, idem.ProblemKeyInvalid)
	if !strings.Contains(string(got.body), "X-Idempotency-Key is empty") {
		t.Errorf("problem: got %s, want it to name X-Idempotency-Key", got.body)
	}
}
