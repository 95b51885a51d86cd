//go:build acceptance

package acceptance

import (
	"database/sql"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// healthTimeout bounds how long /healthz may take to see a change in the
// store's write health: one second for the last commit's outcome to age
// (store.HealthMaxAge), then one probe.
const healthTimeout = 10 * time.Second

// porchTables are the tables a failing disk would refuse writes to.
var porchTables = []string{"porch_rate_counters", "porch_rate_journal", "porch_idem_responses"}

// refuseWrites plants triggers in a running storefront's SQLite file that
// make every insert, update and delete of porch's tables fail, as a
// read-only file or a full disk would for the storefront (the gate runs as
// root, so chmod would not stop it). undo removes them.
func refuseWrites(t *testing.T, path string) (undo func()) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	var names []string
	for _, table := range porchTables {
		for _, event := range []string{"INSERT", "UPDATE", "DELETE"} {
			name := fmt.Sprintf("gate_refuse_%s_%s", table, event)
			q := fmt.Sprintf(`CREATE TRIGGER %s BEFORE %s ON %s BEGIN SELECT RAISE(ABORT, 'gate: writes refused'); END`,
				name, event, table)
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("plant trigger: %v", err)
			}
			names = append(names, name)
		}
	}
	return func() {
		t.Helper()
		for _, name := range names {
			if _, err := db.Exec(`DROP TRIGGER ` + name); err != nil {
				t.Fatalf("drop trigger: %v", err)
			}
		}
	}
}

// /healthz tells the truth about writes: while the store cannot commit it
// answers 503 problem+json with Retry-After, even when no request has
// written (an idle store probes), and 200 "ok" again once writes commit.
func TestHealthzReportsFailingWrites(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-rate-limit", "100", "-rate-window", "1h")
	if r := s.get(t, limited); r.Status != http.StatusOK {
		t.Fatalf("GET %s before: got %s, want 200", limited, r)
	}

	undo := refuseWrites(t, s.db)
	var last reply
	waitFor(t, healthTimeout, "GET /healthz 503 while writes fail, with no traffic", func() bool {
		last = s.get(t, "/healthz")
		return last.Status == http.StatusServiceUnavailable
	})
	checkProblem(t, last, http.StatusServiceUnavailable)
	if last.Header.Get("Retry-After") == "" {
		t.Errorf("503 /healthz: no Retry-After")
	}
	if r := s.get(t, limited); r.Status != http.StatusServiceUnavailable {
		t.Errorf("GET %s while writes fail: got %s, want 503 (fail closed)", limited, r)
	}
	for range 3 {
		if r := s.get(t, "/healthz"); r.Status != http.StatusServiceUnavailable {
			t.Fatalf("GET /healthz after a failed write: got %s, want 503", r)
		}
	}

	undo()
	waitFor(t, healthTimeout, "GET /healthz 200 once writes commit again", func() bool {
		last = s.get(t, "/healthz")
		return last.Status == http.StatusOK
	})
	if string(last.Body) != "ok\n" {
		t.Errorf("GET /healthz: got body %q, want %q", last.Body, "ok\n")
	}
	if r := s.get(t, limited); r.Status != http.StatusOK {
		t.Errorf("GET %s after: got %s, want 200", limited, r)
	}
}
