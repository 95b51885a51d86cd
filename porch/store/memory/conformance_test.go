package memory_test

import (
	"testing"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// open is what a program gets: a fresh, empty store. The suites' cases
// that close a store and open another on its data skip (Forgets): the
// memory store keeps nothing once closed.
func open(t *testing.T, _ string) *memory.Store {
	st, err := memory.Open()
	if err != nil {
		t.Fatalf("memory.Open: %v", err)
	}
	return st
}

func db(t *testing.T) string { return t.Name() }

// The memory store's counters pass the drivers' conformance suite.
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, storetest.Harness{
		DB:      db,
		Open:    func(t *testing.T, name string) driver.Counters { return open(t, name) },
		Forgets: true,
	})
}

// The memory store's idempotency keys pass the drivers' keys suite. It
// runs no SQL, so the suite's owner's writes are only the failing one.
func TestKeysConformance(t *testing.T) {
	storetest.TestKeys(t, storetest.KeysHarness{
		DB:      db,
		Open:    func(t *testing.T, name string) driver.KeyStore { return open(t, name) },
		Forgets: true,
	})
}
