package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// PostgreSQL's counters pass the drivers' conformance suite; a database
// is a fresh schema, which two stores open at once as two instances.
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, storetest.Harness{
		DB: func(t *testing.T) string { return pgtest.DSN(t) },
		Open: func(t *testing.T, dsn string) store.Counters {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := postgres.Open(ctx, dsn, store.Options{})
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			return st
		},
	})
}
