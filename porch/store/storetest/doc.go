// Package storetest is the conformance suite every store driver's rate
// counters pass: a driver's tests call [TestCounters] with a [Harness]
// that opens its stores, and the suite drives real rate limiters
// (porch/rate) over them, for every algorithm (fixed, sliding, GCRA).
//
// It checks what a limiter promises and a driver makes true or breaks:
// exact counts under parallel hits, plain and weighted; the window and
// emission arithmetic at a window's edge, on the store's clock; Reset,
// Peek and a Set's take-back; policy conflicts; counts that survive a
// clean close and reopen; and, for a store several processes share
// ([store.SharedCounters]), an exact limit across two instances on one
// database.
//
// A driver wires it in a few lines. SQLite's, in porch/store/sqlite:
//
//	func TestConformance(t *testing.T) {
//		storetest.TestCounters(t, storetest.Harness{
//			DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
//			Open: func(t *testing.T, db string) store.Counters {
//				st, err := sqlite.Open(db, store.Options{})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return st
//			},
//		})
//	}
//
// A shared store's DB names one database both instances open (for
// PostgreSQL, pgtest.DSN(t): a fresh schema). The suite closes every store
// it opens, after its limiters and pool, as porch.App does. The package's
// own test runs the suite over a store.SharedCounters kept in memory
// (memory_test.go): the least a shared driver must do, and a reference for
// what AddHit owes the rule.
//
// The windows are short (a second at most), so the suite takes a few
// seconds of wall time per algorithm; its timing margins are wide enough
// for a loaded machine. Keep it out of t.Parallel with other timing tests
// on a small machine.
package storetest
