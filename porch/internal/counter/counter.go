// Package counter holds what a rate limit's algorithm and a store share
// about one client key: its [State], the [Rule] that moves it with time,
// and the [Counter] row an exclusive store keeps. porch/internal/algorithm
// implements the rules; porch/store/driver names these types for store
// drivers (driver.State, driver.Rule and driver.Counter are these), so
// that neither the algorithms nor this package import the driver seam
// above them.
package counter

import "time"

// State is one client key's state under its limiter's [Rule], in the
// shape every algorithm shares: what was counted since Start, and what the
// window before it counted. A store keeps it verbatim; only the Rule gives
// it meaning. Times are on the store's timeline (see
// driver.ExclusiveCounters.Now) or, for a shared store, the server's
// clock.
type State struct {
	// Start opens the state's epoch: a fixed or sliding window's start, or
	// the instant a GCRA bucket's emissions are counted from.
	Start time.Time
	// Count is the weight counted since Start. Hits are only ever added to
	// it within one epoch, so a count written ahead of it covers it.
	Count int64
	// Prev is what the previous window counted (the sliding window's
	// estimate weighs it); 0 for the other algorithms.
	Prev int64
}

// Rule is a limiter's algorithm with its policy: how a key's [State]
// moves with time and how much weight it admits. Each of porch/rate's
// algorithms implements it; a shared store applies it to the states it
// reads, so that the database and the limiter decide alike, and carries
// out Advance in its own statements (a driver's statements per
// algorithm, named by Algorithm).
type Rule interface {
	// Algorithm names the algorithm: "fixed", "sliding" or "gcra".
	Algorithm() string
	// Window is the policy's window: Limit requests per Window.
	Window() time.Duration
	// Interval is GCRA's emission interval, Window/Limit rounded up; 0
	// for the other algorithms.
	Interval() time.Duration
	// Advance returns s as it stands at now: a window that has closed
	// rolled over, an idle bucket started afresh. A zero State is a key
	// never seen. It never lowers what s holds back at now.
	Advance(s State, now time.Time) State
	// Room is the weight an advanced s admits at now; it may be zero or
	// negative.
	Room(s State, now time.Time) int64
	// Expires is when s stops holding anything back: from then on it
	// advances to the zero state's equal, and a store may forget it.
	Expires(s State) time.Time
}

// Counter is one client key's stored state: what an exclusive store
// persists and loads back, its State with what a row needs beside it.
type Counter struct {
	Key string
	// State is the key's state; its Start opens the window (or the GCRA
	// bucket's epoch) the row counts in.
	State
	Window time.Duration
	// Expires is when the state can be forgotten (Rule.Expires); if zero,
	// when the window closes, Start+Window.
	Expires time.Time
}

// End is when the counter can be forgotten: Expires, or the window's close.
func (c Counter) End() time.Time {
	if !c.Expires.IsZero() {
		return c.Expires
	}
	return c.Start.Add(c.Window)
}
