// Package clock is the time porch reads: a [Clock] gives a wall reading,
// for what a client reads, and a monotonic one, for the arithmetic a
// wall-clock jump must not move. The framework (porch), the middlewares and
// the stores all take one, so it lives apart from each of them; tests pass
// porchtest.FakeClock instead of [System].
//
//	st, err := sqlite.Open("app.db", sqlite.Options{Options: store.Options{Clock: clock.System{}}})
package clock

import "time"

// Clock gives the two readings store-backed middleware needs: the wall clock,
// for anything a client reads (a reset timestamp), and a monotonic reading,
// for window arithmetic, which a wall-clock jump must not move.
type Clock interface {
	// Wall reads the wall clock.
	Wall() time.Time
	// Monotonic reports the time elapsed since a fixed origin in this
	// process. It never goes backwards.
	Monotonic() time.Duration
}

// System is the process's clocks. Its zero value is the only value, and it
// is safe for concurrent use.
type System struct{}

var _ Clock = System{}

// processStart carries Go's monotonic reading; time.Since on it is immune to
// wall-clock changes.
var processStart = time.Now()

// Wall reads the wall clock, stripped of its monotonic reading.
func (System) Wall() time.Time { return time.Now().Round(0) }

// Monotonic reports the monotonic time since the process started.
func (System) Monotonic() time.Duration { return time.Since(processStart) }
