package sqlite

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// A file written by a build that knew only the first migration opens, gains
// the headers column, and keeps its stored responses: they replay with no
// kept headers, and new ones store theirs.
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

	hold, err := s.Reserve(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Location": {"/orders/2"}}
	if err := hold.Save(ctx, store.Response{Digest: []byte{2}, Status: 201, Header: want}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.loadResponse(ctx, "new"); err != nil || !reflect.DeepEqual(got.Header, want) {
		t.Errorf("new row: got header %v (err %v), want %v", got.Header, err, want)
	}
}
