//go:build cgo

package sqlite

import (
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// timeline is a clock that reads like the wall clock but only moves
// monotonically: it is anchored once at max(wall clock, floor) and then
// advanced by the monotonic clock. Windows are measured on it, so a wall
// clock set back, before or across a restart, grants no extra allowance:
// pass the newest persisted window start as floor.
//
// A timeline is immutable and safe for concurrent use.
type timeline struct {
	clock      clock.Clock
	anchor     time.Time
	anchorMono time.Duration
}

// newTimeline anchors a timeline on c at max(c.Wall(), floor).
func newTimeline(c clock.Clock, floor time.Time) timeline {
	anchor := c.Wall()
	if floor.After(anchor) {
		anchor = floor
	}
	return timeline{clock: c, anchor: anchor, anchorMono: c.Monotonic()}
}

// now reads the timeline.
func (t timeline) now() time.Time { return t.anchor.Add(t.clock.Monotonic() - t.anchorMono) }

// wall reads the underlying wall clock, for values a client reads.
func (t timeline) wall() time.Time { return t.clock.Wall() }
