package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
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

	s, err := Open(ctx, dsn, Options{})
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

// Migration 4 turns text keys into dbKeys, long ones included: a counter
// stored under a 300-byte text key keeps counting under it after the
// upgrade, in the same row.
func TestUpgradeKeepsTextKeysCounting(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	long := "rate:api:p:" + strings.Repeat("é", 150) // 311 bytes of valid UTF-8
	queries := append([]string{}, postgresMigrations[:3]...)
	queries = append(queries, pgVersionTable, fmt.Sprintf(pgWriteVersion, 3))
	for _, q := range queries {
		if _, err := old.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, k := range []string{"rate:api:p:bob", long} {
		if _, err := old.Exec(ctx, `INSERT INTO porch_rate_counters VALUES ($1, 0, 3600000, 5, 9000000000000)`, k); err != nil {
			t.Fatal(err)
		}
	}
	old.Close(ctx)

	p := openInternal(t, dsn, Options{})
	for _, k := range []string{"rate:api:p:bob", long} {
		ops := []commit.Op{{Hit: &commit.Hit{Key: k, Rule: fixed(100, time.Hour), N: 1}}}
		if err := p.writeBatch(ops); err != nil {
			t.Fatalf("writeBatch: %v", err)
		}
		if got := wouldCount(ops[0].Hit); got != 6 {
			t.Errorf("%d-byte key after the upgrade: count %d, want 6 (5 stored before it)", len(k), got)
		}
	}
	if n := count(t, p, `SELECT count(*) FROM porch_rate_counters`); n != 2 {
		t.Errorf("%d counter rows, want 2", n)
	}
}
