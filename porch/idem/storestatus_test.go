package idem_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// A status Options.StoreStatus refuses is sent unstored, and its handler's
// writes are discarded with it, as a 5xx's are: they commit only with the
// response they belong to, so the corrected retry runs on a clean slate.
func TestStoreStatusDiscardsWrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		h := &ledgerHandler{}
		h.status.Store(http.StatusConflict)
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{
			StoreStatus: func(status int) bool { return status < 400 },
		})
		mh := m.Handler(h)
		first := send(mh, "k", "a")
		if first.Code != http.StatusConflict || first.Header().Get(idem.ReplayedHeader) != "" {
			t.Fatalf("first: got %d %q, want the handler's 409", first.Code, first.Body)
		}
		if got := b.count(t); got != 0 {
			t.Fatalf("ledger rows after an unstored 409: got %d, want 0", got)
		}
		h.status.Store(http.StatusCreated)
		if got := send(mh, "k", "a"); got.Code != http.StatusCreated || got.Body.String() != "run 2" {
			t.Fatalf("retry: got %d %q, want 201 \"run 2\"", got.Code, got.Body)
		}
		if got := send(mh, "k", "a"); got.Code != http.StatusCreated || got.Body.String() != "run 2" {
			t.Fatalf("second retry: got %d %q, want the stored 201 \"run 2\"", got.Code, got.Body)
		}
		if got := b.count(t); got != 1 {
			t.Fatalf("ledger rows: got %d, want 1", got)
		}
	})
}

// StoreStatus may store what the default does not (here a 503 a handler
// means as final), and refuse what it does.
func TestStoreStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		stored bool
	}{{http.StatusOK, true}, {http.StatusUnprocessableEntity, false}, {http.StatusServiceUnavailable, true}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, "call %d", n)
			}}
			e := newEnv(t, envConfig{opt: idem.Options{
				StoreStatus: func(s int) bool { return s < 300 || s == http.StatusServiceUnavailable },
			}}, o)
			e.do(t, http.MethodPost, "/orders", "one", "k")
			got := e.do(t, http.MethodPost, "/orders", "one", "k")
			if got.status != tc.status || got.replayed() != tc.stored {
				t.Errorf("retry: got %s replayed=%v, want %d replayed=%v", got, got.replayed(), tc.status, tc.stored)
			}
			wantRows, wantCalls := 0, int64(2)
			if tc.stored {
				wantRows, wantCalls = 1, 1
			}
			if rows, calls := e.rows(t), o.calls.Load(); rows != wantRows || calls != wantCalls {
				t.Errorf("rows %d, calls %d: want %d and %d", rows, calls, wantRows, wantCalls)
			}
		})
	}
}

// A response larger than MaxStoredBody is withheld: the client gets a 500
// problem saying nothing was done, the handler's writes are discarded, and
// the key is free, so the retry runs. A body of exactly the limit is
// stored.
func TestMaxStoredBody(t *testing.T) {
	eachBackend(t, func(t *testing.T, b txBackend) {
		const limit = 64
		var runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if err := idem.Exec(r.Context(), `INSERT INTO ledger (id, note) VALUES ($1, $2)`, fmt.Sprint(n), "run"); err != nil {
				t.Errorf("exec: %v", err)
			}
			size := limit
			if n == 1 {
				size = limit + 1
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "%d%s", n, strings.Repeat("x", size-1))
		})
		m := idem.New(newPool(t, porchOptions()), b.st, idem.Options{MaxStoredBody: limit})
		mh := m.Handler(h)
		first := send(mh, "k", "a")
		if first.Code != http.StatusInternalServerError || !strings.Contains(first.Body.String(), idem.ProblemResponseTooLarge) {
			t.Fatalf("too large: got %d %s, want 500 %s", first.Code, first.Body, idem.ProblemResponseTooLarge)
		}
		if got := b.count(t); got != 0 {
			t.Fatalf("ledger rows after a withheld response: got %d, want 0", got)
		}
		second := send(mh, "k", "a")
		if second.Code != http.StatusCreated || second.Body.Len() != limit || !strings.HasPrefix(second.Body.String(), "2") {
			t.Fatalf("retry: got %d %q, want run 2's 201 of %d bytes", second.Code, second.Body, limit)
		}
		third := send(mh, "k", "a")
		if third.Code != http.StatusCreated || third.Body.String() != second.Body.String() || third.Header().Get(idem.ReplayedHeader) != "true" {
			t.Fatalf("second retry: got %d %q, want the stored 201", third.Code, third.Body)
		}
		if got := b.count(t); got != 1 || runs.Load() != 2 {
			t.Fatalf("ledger rows %d, runs %d: want 1 and 2", got, runs.Load())
		}
	})
}
