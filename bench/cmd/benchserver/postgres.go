package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// openPostgres opens porch's PostgreSQL store in a fresh schema of dsn's
// database, and registers on app the store's Close and then the schema's
// drop, so that runs never see each other's rows.
func openPostgres(ctx context.Context, dsn string, opt store.Options, app *porch.App) (*postgres.Store, error) {
	var b [6]byte
	rand.Read(b[:])
	schema := "porch_bench_" + hex.EncodeToString(b[:])
	if err := execPostgres(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func(ctx context.Context) error { return execPostgres(ctx, dsn, "DROP SCHEMA "+schema+" CASCADE") }
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		drop(ctx)
		return nil, fmt.Errorf("-postgres must be a postgres:// URL, got %q", dsn)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pg, err := postgres.Open(ctx, u.String(), opt)
	if err != nil {
		drop(ctx)
		return nil, err
	}
	app.OnShutdown(drop) // closers run in reverse: the store closes first
	app.OnShutdown(pg.Close)
	return pg, nil
}

func execPostgres(ctx context.Context, dsn, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
