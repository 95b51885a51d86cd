package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// openStore opens a store on dsn for the suites, which close it.
func openStore(t *testing.T, dsn string) *postgres.Store {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	return st
}

// PostgreSQL's counters pass the drivers' conformance suite; a database
// is a fresh schema, which two stores open at once as two instances.
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, storetest.Harness{
		DB:   func(t *testing.T) string { return pgtest.DSN(t) },
		Open: func(t *testing.T, dsn string) driver.Counters { return openStore(t, dsn) },
	})
}

// PostgreSQL's idempotency keys pass the drivers' keys suite; the owner's
// writes go to a table of the test's schema, read through Pool.
func TestKeysConformance(t *testing.T) {
	storetest.TestKeys(t, storetest.KeysHarness{
		DB:   func(t *testing.T) string { return pgtest.DSN(t) },
		Open: func(t *testing.T, dsn string) driver.KeyStore { return openStore(t, dsn) },
		Writes: func(t *testing.T, st driver.KeyStore) func(string) int {
			pool := st.(*postgres.Store).Pool()
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `CREATE TABLE storetest_writes (note TEXT)`); err != nil {
				t.Fatalf("create the application's table: %v", err)
			}
			return func(note string) int {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM storetest_writes WHERE note = $1`, note).Scan(&n); err != nil {
					t.Fatalf("count the application's rows: %v", err)
				}
				return n
			}
		},
	})
}

// PostgreSQL's in-flight slots pass the drivers' slots suite; two stores
// on one schema are two instances.
func TestSlotsConformance(t *testing.T) {
	storetest.TestSlots(t, storetest.SlotsHarness{
		DB:   func(t *testing.T) string { return pgtest.DSN(t) },
		Open: func(t *testing.T, dsn string) driver.SharedSlots { return openStore(t, dsn) },
	})
}
