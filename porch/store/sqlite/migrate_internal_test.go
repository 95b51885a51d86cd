package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// A file written by a build that knew only the first migration opens, gains
// the headers column, and keeps its stored responses: they replay with no
// kept headers. (TestResponseRoundTrip stores headers in a current file.)
func TestUpgradeKeepsStoredResponses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	old, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		sqliteMigrations[0],
		`PRAGMA user_version = 1`,
		`INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
			VALUES ('old', x'01', 201, 'application/json', '{}', 0, 9000000000000)`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close()

	s := openInternal(t, path)
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	got, ok, err := s.loadResponse(ctx, "old")
	if err != nil || !ok {
		t.Fatalf("load the old row: ok %v, err %v", ok, err)
	}
	if got.Status != 201 || string(got.Body) != "{}" || got.Header != nil {
		t.Errorf("old row: got %d %q header %v, want 201 \"{}\" and no header", got.Status, got.Body, got.Header)
	}
}
