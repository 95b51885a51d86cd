package memory

import (
	"sync"
	"testing"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// harnessData names each test's data, so that the suites can close a
// store and open another on what it held, as they reopen a database file.
// Nothing outside the package's tests can: memory.Open always starts
// empty (TestOpenStartsEmpty).
type harnessData struct {
	mu sync.Mutex // protects byName
	// byName holds each test's data, under a name the suite passes back.
	byName map[string]*data
}

func (h *harnessData) db(t *testing.T) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName == nil {
		h.byName = make(map[string]*data)
	}
	name := t.Name()
	h.byName[name] = newData()
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.byName, name)
	})
	return name
}

func (h *harnessData) open(t *testing.T, name string) *Store {
	h.mu.Lock()
	d := h.byName[name]
	h.mu.Unlock()
	st, err := openOn(d, Options{})
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return st
}

// The memory store's counters pass the drivers' conformance suite.
func TestConformance(t *testing.T) {
	var h harnessData
	storetest.TestCounters(t, storetest.Harness{
		DB:   h.db,
		Open: func(t *testing.T, db string) store.Counters { return h.open(t, db) },
	})
}

// The memory store's idempotency keys pass the drivers' keys suite. It
// runs no SQL, so the suite's owner's writes are only the failing one.
func TestKeysConformance(t *testing.T) {
	var h harnessData
	storetest.TestKeys(t, storetest.KeysHarness{
		DB:   h.db,
		Open: func(t *testing.T, db string) store.Keys { return h.open(t, db) },
	})
}
