package porch

import (
	"sync"
	"time"
)

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

// SystemClock is the process's clocks. Offset is added to every wall reading
// (zero for the real clock); it exists to simulate a clock that jumped.
type SystemClock struct {
	Offset time.Duration
}

// processStart carries Go's monotonic reading; time.Since on it is immune to
// wall-clock changes.
var processStart = time.Now()

// Wall reads the wall clock plus Offset, stripped of its monotonic reading.
func (c SystemClock) Wall() time.Time { return time.Now().Add(c.Offset).Round(0) }

// Monotonic reports the monotonic time since the process started.
func (SystemClock) Monotonic() time.Duration { return time.Since(processStart) }

// FakeClock is a Clock for tests: time moves only when told. Advance moves
// both readings; Jump moves the wall clock alone, as an operator or NTP
// would. The zero value starts at the Unix epoch. It is safe for concurrent
// use.
type FakeClock struct {
	mu   sync.Mutex // protects the fields below
	wall time.Time
	mono time.Duration
}

// NewFakeClock starts a fake clock at wall.
func NewFakeClock(wall time.Time) *FakeClock { return &FakeClock{wall: wall} }

// Wall reads the fake wall clock.
func (c *FakeClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall.IsZero() {
		return time.Unix(0, 0)
	}
	return c.wall
}

// Monotonic reads the fake monotonic clock.
func (c *FakeClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass on both clocks.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall.IsZero() {
		c.wall = time.Unix(0, 0)
	}
	c.wall = c.wall.Add(d)
	c.mono += d
}

// Jump moves the wall clock by d (negative: backwards) without time passing.
func (c *FakeClock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall.IsZero() {
		c.wall = time.Unix(0, 0)
	}
	c.wall = c.wall.Add(d)
}

// Timeline is a clock that reads like the wall clock but only moves
// monotonically: it is anchored once at max(wall clock, floor) and then
// advanced by the monotonic clock. Windows are measured on it, so a wall clock
// set back, before or across a restart, grants no extra allowance: pass the
// newest persisted window start as floor.
//
// A Timeline is immutable and safe for concurrent use.
type Timeline struct {
	clock      Clock
	anchor     time.Time
	anchorMono time.Duration
}

// NewTimeline anchors a timeline on c at max(c.Wall(), floor).
func NewTimeline(c Clock, floor time.Time) Timeline {
	anchor := c.Wall()
	if floor.After(anchor) {
		anchor = floor
	}
	return Timeline{clock: c, anchor: anchor, anchorMono: c.Monotonic()}
}

// Now reads the timeline.
func (t Timeline) Now() time.Time { return t.anchor.Add(t.clock.Monotonic() - t.anchorMono) }

// Wall reads the underlying wall clock, for values a client reads.
func (t Timeline) Wall() time.Time { return t.clock.Wall() }
