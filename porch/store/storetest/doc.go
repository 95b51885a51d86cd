// Package storetest holds the conformance suites store drivers pass: one
// for the rate limiter's counters and one for idempotency keys. A
// driver's tests call [TestCounters] with a [Harness] that opens its
// stores, and the suite drives the store's counting interfaces directly,
// with the rules of every algorithm porch counts with (fixed, sliding,
// GCRA); a driver that keeps idempotency keys calls [TestKeys] with a
// [KeysHarness] too. Neither imports a middleware.
//
// For a store that decides every hit ([driver.SharedCounters]) it checks
// exact counts under parallel hits, plain and weighted, and across two
// instances on one database; that each hit at a window's edge is decided
// as the rule decides, on the store's clock; ResetHit, TakeBack (and its
// order before a later hit), PeekHit and weights; and counts that survive
// a close and reopen. For a store whose process is its counters' only
// writer ([driver.ExclusiveCounters]) it checks that rows written through
// from many goroutines load back as each key's newest, that a row loads
// until it ends and not after, that a limiter's state resumes after a
// reopen as it was, and that the store's timeline never runs behind a
// persisted window. For both, that ClaimPolicy refuses a second policy of
// one name while the first holds.
//
// A driver wires it in a few lines. SQLite's, in porch/store/sqlite:
//
//	func TestConformance(t *testing.T) {
//		storetest.TestCounters(t, storetest.Harness{
//			DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
//			Open: func(t *testing.T, db string) driver.Counters {
//				st, err := sqlite.Open(db, sqlite.Options{})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return st
//			},
//		})
//	}
//
// A shared store's DB names one database both instances open (for
// PostgreSQL, the DSN of a schema fresh to the test). The suite closes every store
// it opens. A shared driver that has no statements for an algorithm
// answers driver.ErrAlgorithm, and the suite skips that algorithm for it.
// The package's own test runs the suite over a driver.SharedCounters kept
// in memory (memory_test.go): the least a shared driver must do, and a
// reference for what AddHit owes the rule.
//
// [TestKeys] drives a [driver.KeyStore] as porch/idem does and checks what
// idem relies on: a saved response comes back whole, to the next owner
// and to Inspect, and as a copy of its own; it survives a close and
// reopen; one owner holds a key at a time, and Release lets the next in;
// an owner's Exec writes commit with its Save and never without it (with
// [KeysHarness.Writes]; a store that runs no SQL fails Exec with
// store.ErrWriteFailed); a response past its TTL is gone; Inspect and
// Forget refuse a held key with store.ErrKeyHeld; an ended reservation
// answers driver.ErrReleased; and a key of any bytes (NUL, invalid UTF-8,
// past any index's length) is a key of its own. A store that keeps
// nothing once closed sets Forgets in either harness, and the cases that
// reopen it skip.
//
// The windows are short (a fraction of a second), so the counters suite takes
// about a second of wall time per algorithm; its timing margins are wide
// enough for a loaded machine.
package storetest
