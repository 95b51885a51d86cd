package sqlite

import (
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

func TestTimelineIgnoresWallJumps(t *testing.T) {
	tests := []struct {
		name string
		jump time.Duration
	}{
		{"wall set back an hour", -time.Hour},
		{"wall set forward an hour", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := porchtest.NewFakeClock(t0)
			tl := newTimeline(c, time.Time{})
			c.Advance(10 * time.Second)
			c.Jump(tt.jump)
			if got, want := tl.now(), t0.Add(10*time.Second); !got.Equal(want) {
				t.Errorf("got now %v, want %v: the jump moved the timeline", got, want)
			}
			if got, want := tl.wall(), t0.Add(10*time.Second+tt.jump); !got.Equal(want) {
				t.Errorf("got wall %v, want %v: wall must follow the wall clock", got, want)
			}
		})
	}
}

func TestNewTimelineAnchor(t *testing.T) {
	tests := []struct {
		name  string
		floor time.Time
		want  time.Time
	}{
		{"no floor anchors at the wall clock", time.Time{}, t0},
		{"floor in the past anchors at the wall clock", t0.Add(-time.Hour), t0},
		{"floor in the future anchors at the floor", t0.Add(time.Hour), t0.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := porchtest.NewFakeClock(t0)
			c.Advance(time.Minute) // the monotonic origin is not the anchor
			c.Jump(-time.Minute)
			tl := newTimeline(c, tt.floor)
			if got := tl.now(); !got.Equal(tt.want) {
				t.Errorf("got now %v, want %v", got, tt.want)
			}
			c.Advance(5 * time.Second)
			if got, want := tl.now(), tt.want.Add(5*time.Second); !got.Equal(want) {
				t.Errorf("after 5s: got now %v, want %v", got, want)
			}
		})
	}
}
