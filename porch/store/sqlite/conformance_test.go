package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// SQLite's counters pass the drivers' conformance suite; a database is a
// file, reopened after its store closes.
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, storetest.Harness{
		DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
		Open: func(t *testing.T, db string) store.Counters {
			st, err := sqlite.Open(db, store.Options{})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			return st
		},
	})
}
