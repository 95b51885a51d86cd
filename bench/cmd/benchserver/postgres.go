package main

import (
	"context"

	"github.com/writeonce/porch-go/internal/pgschema"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// openPostgres opens porch's PostgreSQL store in a fresh schema of dsn's
// database, and registers on app the store's Close and then the schema's
// drop, so that runs never see each other's rows.
func openPostgres(ctx context.Context, dsn string, opt store.Options, app *porch.App) (*postgres.Store, error) {
	schemaDSN, drop, err := pgschema.Fresh(ctx, dsn, "porch_bench_")
	if err != nil {
		return nil, err
	}
	pg, err := postgres.Open(ctx, schemaDSN, postgres.Options{Options: opt})
	if err != nil {
		drop(ctx)
		return nil, err
	}
	app.OnShutdown(drop) // closers run in reverse: the store closes first
	app.OnShutdown(pg.Close)
	return pg, nil
}
