package idem_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// A handler that sends 103 Early Hints before its 201: the interim 103 is
// not the response. The first client, the retry answered from the stored
// response, and the stored record itself each carry the final 201.
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
