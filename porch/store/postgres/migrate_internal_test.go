package postgres

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
)

// A database migrated by a build that knew only the first two migrations
// gains the headers column on Open and keeps its stored responses: they
// replay with no kept headers, and new ones store theirs.
func TestUpgradeKeepsStoredResponses(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		postgresMigrations[0],
		postgresMigrations[1],
		pgVersionTable,
		fmt.Sprintf(pgWriteVersion, 2),
		`INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
			VALUES ('old', '\x01', 201, 'application/json', '{}', 0, 9000000000000)`,
	} {
		if _, err := old.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close(ctx)

	s, err := Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	load := func(key string) store.Response {
		t.Helper()
		hold, err := s.Reserve(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Release()
		got, ok, err := hold.Load(ctx)
		if err != nil || !ok {
			t.Fatalf("load %s: ok %v, err %v", key, ok, err)
		}
		return got
	}
	if got := load("old"); got.Status != 201 || string(got.Body) != "{}" || got.Header != nil {
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
	if got := load("new"); !reflect.DeepEqual(got.Header, want) {
		t.Errorf("new row: got header %v, want %v", got.Header, want)
	}
}
