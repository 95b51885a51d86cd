package idem_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// A handler that sends 103 Early Hints before its 201: the stored status
// must be the final one. The middleware buffers the response in porch's
// bufferWriter, which takes the first WriteHeader as the status and drops
// the rest: the 103 is stored and replayed, and every client (the first
// included) gets 103 then an implicit 200, never the 201 (a Location-bearing
// create reads as a plain 200).
func TestEarlyHintsAreNotTheStoredStatus(t *testing.T) {
	o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	}}
	e := newEnv(t, envConfig{}, o)
	first := e.do(t, http.MethodPost, "/orders", "one", "k")
	retry := e.do(t, http.MethodPost, "/orders", "one", "k")
	st, err := e.m.Lookup(t.Context(), idem.Scope{Addr: "127.0.0.1"}, "k")
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusCreated || retry.status != http.StatusCreated || st.Status != http.StatusCreated {
		t.Fatalf("first %d, replay %d, stored %d: want 201 each", first.status, retry.status, st.Status)
	}
}
