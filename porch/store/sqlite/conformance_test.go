package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// SQLite's counters pass the drivers' conformance suite; a database is a
// file, reopened after its store closes.
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, storetest.Harness{
		DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
		Open: func(t *testing.T, db string) driver.Counters {
			st, err := sqlite.Open(db, sqlite.Options{})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			return st
		},
	})
}

// SQLite's idempotency keys pass the drivers' keys suite; the owner's
// writes go to a table of the same file, read through DB.
func TestKeysConformance(t *testing.T) {
	storetest.TestKeys(t, storetest.KeysHarness{
		DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
		Open: func(t *testing.T, db string) driver.KeyStore {
			st, err := sqlite.Open(db, sqlite.Options{})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			return st
		},
		Writes: func(t *testing.T, st driver.KeyStore) func(string) int {
			db := st.(*sqlite.Store).DB()
			if _, err := db.Exec(`CREATE TABLE storetest_writes (note TEXT)`); err != nil {
				t.Fatalf("create the application's table: %v", err)
			}
			return func(note string) int {
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM storetest_writes WHERE note = ?`, note).Scan(&n); err != nil {
					t.Fatalf("count the application's rows: %v", err)
				}
				return n
			}
		},
	})
}
