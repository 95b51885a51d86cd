// Package testkit holds the test helpers that porch's packages share and
// that need no server: waiting for goroutines by their stacks, capturing
// log output, and checking a problem+json answer. Servers have their own
// homes: internal/pgtest (PostgreSQL), internal/pgtest/pgstore (porch's
// PostgreSQL store on one) and internal/redistest (Redis).
//
// It is imported only from _test.go files and the acceptance gate, never
// from a package a user builds, so nothing here reaches a user's module.
// It imports the standard library alone, so that any package's tests may
// use it, porch's own internal ones included, without an import cycle.
//
//	func TestParks(t *testing.T) {
//		go wait()
//		testkit.WaitStacks(t, "mypkg.wait(", 1, 10*time.Second)
//	}
package testkit
