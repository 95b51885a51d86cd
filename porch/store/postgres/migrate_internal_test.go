package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
)

// A database migrated by a build that knew only the first two migrations
// gains the headers column on Open and keeps its stored responses: they
// replay with no kept headers. (TestPostgresReserveExcludesOtherInstances
// stores headers in a current one.)
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
	hold, err := s.Reserve(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	got, ok, err := hold.Load(ctx)
	if err != nil || !ok {
		t.Fatalf("load the old row: ok %v, err %v", ok, err)
	}
	if got.Status != 201 || string(got.Body) != "{}" || got.Header != nil {
		t.Errorf("old row: got %d %q header %v, want 201 \"{}\" and no header", got.Status, got.Body, got.Header)
	}
}
