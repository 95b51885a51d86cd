package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// KeysHarness is how the idempotency keys suite reaches a driver, as
// [Harness] is for counters: where a fresh database is, and how to open a
// store on one. The suite closes every store it opens, and opens another
// on the same database after one has closed (a restart).
type KeysHarness struct {
	// DB returns a fresh, empty database for one test, in whatever form
	// Open takes, and removes it when t ends.
	DB func(t *testing.T) string
	// Open opens a store on db, failing t if it cannot. It is called again
	// on a db whose store has closed.
	Open func(t *testing.T, db string) driver.KeyStore
	// Writes, if set, creates the application's table
	//
	//	CREATE TABLE storetest_writes (note TEXT)
	//
	// in st's database, through the driver's own handle (its statements
	// are the application's, not porch's), and returns a count of the
	// rows whose note is note, read the same way. The suite then checks
	// that an owner's Exec commits with its Save and never without it. A
	// store that runs no SQL leaves it nil.
	Writes func(t *testing.T, st driver.KeyStore) (count func(note string) int)
	// Forgets says the store keeps nothing once closed (an in-memory
	// store): the cases that restart it skip, or stop before the restart.
	Forgets bool
}

// keysCases are the properties of driver.KeyStore the suite checks.
var keysCases = []struct {
	name string
	run  func(t *testing.T, h KeysHarness)
}{
	{"RoundTrip", testKeysRoundTrip},
	{"Copies", testKeysCopies},
	{"Durable", testKeysDurable},
	{"Exclusive", testKeysExclusive},
	{"Release", testKeysRelease},
	{"OwnerWrites", testKeysOwnerWrites},
	{"Expiry", testKeysExpiry},
	{"InspectForget", testKeysInspectForget},
	{"Ended", testKeysEnded},
	{"AnyBytes", testKeysAnyBytes},
}

// keysTimeout bounds each call the suite makes of a store, so that a
// driver that never answers fails the test instead of hanging it.
const keysTimeout = 20 * time.Second

// keysPrompt is how long a Reserve that should be granted at once, the
// key being free, may take: far above a healthy store's time, short
// enough that a store that never lets go of a key fails in seconds.
const keysPrompt = 5 * time.Second

// TestKeys runs the idempotency keys suite over h's stores: a subtest per
// property (see the package doc). It imports nothing of the middlewares:
// it drives driver.KeyStore as porch/idem does, and checks what idem relies on.
func TestKeys(t *testing.T, h KeysHarness) {
	if h.DB == nil || h.Open == nil {
		t.Fatal("storetest: KeysHarness needs DB and Open")
	}
	for _, c := range keysCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// keysDB is one database under test, and the store open on it.
type keysDB struct {
	h  KeysHarness
	db string
	st driver.KeyStore // nil while closed
}

// open opens a store on a fresh database; it closes at t's end.
func (h KeysHarness) open(t *testing.T) *keysDB {
	t.Helper()
	k := &keysDB{h: h, db: h.DB(t)}
	k.reopen(t)
	t.Cleanup(func() { k.close(t) })
	return k
}

// reopen opens a store on k's database, which has none open.
func (k *keysDB) reopen(t *testing.T) {
	t.Helper()
	k.st = k.h.Open(t, k.db)
	if k.st == nil {
		t.Fatal("storetest: KeysHarness.Open returned a nil store")
	}
}

// close closes k's store, if open, failing t on error.
func (k *keysDB) close(t *testing.T) {
	t.Helper()
	if k.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), keysTimeout)
	defer cancel()
	if err := k.st.Close(ctx); err != nil {
		t.Errorf("close store: %v", err)
	}
	k.st = nil
}

// restart closes k's store and opens another on its database.
func (k *keysDB) restart(t *testing.T) {
	t.Helper()
	k.close(t)
	k.reopen(t)
}
