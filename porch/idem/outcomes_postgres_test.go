package idem_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// TestPostgresOutcomes runs the stored-response outcomes the SQLite tests
// cover on the PostgreSQL store: the middleware must not depend on which
// store it is given.
func TestPostgresOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		write       func(w http.ResponseWriter)
		secondBody  string
		wantFirst   int
		wantSecond  int
		wantReplay  bool
		wantCalls   int64
		wantProblem string
	}{
		{"replay", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"order":1}`)
		}, "one", http.StatusCreated, http.StatusCreated, true, 1, ""},
		// A nil body must be stored as an empty one: bytea is NOT NULL.
		{"empty body replays", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
			"one", http.StatusNoContent, http.StatusNoContent, true, 1, ""},
		{"reused key", func(w http.ResponseWriter) { w.WriteHeader(http.StatusCreated); fmt.Fprint(w, "ok") },
			"two", http.StatusCreated, http.StatusUnprocessableEntity, false, 1, idem.ProblemKeyReused},
		{"5xx not stored", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
			"one", http.StatusBadGateway, http.StatusBadGateway, false, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
			o := &orders{fn: func(_ int64, w http.ResponseWriter, _ *http.Request) { tc.write(w) }}
			e := newEnvOn(t, st, envConfig{}, o)

			first := e.do(t, http.MethodPost, "/orders", "one", "k")
			if first.status != tc.wantFirst {
				t.Errorf("first: got %s, want %d", first, tc.wantFirst)
			}
			second := e.do(t, http.MethodPost, "/orders", tc.secondBody, "k")
			if tc.wantProblem != "" {
				wantProblem(t, second, tc.wantSecond, tc.wantProblem)
			} else if second.status != tc.wantSecond || second.replayed() != tc.wantReplay ||
				(tc.wantReplay && !bytes.Equal(second.body, first.body)) {
				t.Errorf("second: got %s replayed=%v, want %d replayed=%v", second, second.replayed(),
					tc.wantSecond, tc.wantReplay)
			}
			if got := o.calls.Load(); got != tc.wantCalls {
				t.Errorf("handler calls: got %d, want %d", got, tc.wantCalls)
			}
		})
	}
}
