package porch_test

import (
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

func TestFakeClock(t *testing.T) {
	c := porch.NewFakeClock(t0)
	c.Advance(time.Minute)
	if got, want := c.Wall(), t0.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after Advance: got wall %v, want %v", got, want)
	}
	if got := c.Monotonic(); got != time.Minute {
		t.Errorf("after Advance: got monotonic %v, want %v", got, time.Minute)
	}
	c.Jump(-time.Hour)
	if got, want := c.Wall(), t0.Add(time.Minute-time.Hour); !got.Equal(want) {
		t.Errorf("after Jump: got wall %v, want %v", got, want)
	}
	if got := c.Monotonic(); got != time.Minute {
		t.Errorf("after Jump: got monotonic %v, want %v (a jump is not elapsed time)", got, time.Minute)
	}
}

func TestFakeClockZeroValueStartsAtEpoch(t *testing.T) {
	var c porch.FakeClock
	if got := c.Wall(); !got.Equal(time.Unix(0, 0)) {
		t.Errorf("got wall %v, want the Unix epoch", got)
	}
	c.Advance(time.Second)
	if got := c.Wall(); !got.Equal(time.Unix(1, 0)) {
		t.Errorf("after Advance(1s): got wall %v, want %v", got, time.Unix(1, 0))
	}
}

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
			c := porch.NewFakeClock(t0)
			tl := porch.NewTimeline(c, time.Time{})
			c.Advance(10 * time.Second)
			c.Jump(tt.jump)
			if got, want := tl.Now(), t0.Add(10*time.Second); !got.Equal(want) {
				t.Errorf("got Now %v, want %v: the jump moved the timeline", got, want)
			}
			if got, want := tl.Wall(), t0.Add(10*time.Second+tt.jump); !got.Equal(want) {
				t.Errorf("got Wall %v, want %v: Wall must follow the wall clock", got, want)
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
			c := porch.NewFakeClock(t0)
			c.Advance(time.Minute) // the monotonic origin is not the anchor
			c.Jump(-time.Minute)
			tl := porch.NewTimeline(c, tt.floor)
			if got := tl.Now(); !got.Equal(tt.want) {
				t.Errorf("got Now %v, want %v", got, tt.want)
			}
			c.Advance(5 * time.Second)
			if got, want := tl.Now(), tt.want.Add(5*time.Second); !got.Equal(want) {
				t.Errorf("after 5s: got Now %v, want %v", got, want)
			}
		})
	}
}

func TestSystemClock(t *testing.T) {
	c := porch.SystemClock{Offset: -time.Hour}
	before := time.Now().Add(-time.Hour)
	got := c.Wall()
	after := time.Now().Add(-time.Hour)
	if got.Before(before.Round(0)) || got.After(after.Round(0)) {
		t.Errorf("got wall %v, want between %v and %v", got, before, after)
	}
	if got != got.Round(0) {
		t.Errorf("got a wall reading with a monotonic part; want it stripped")
	}
	m1 := c.Monotonic()
	m2 := c.Monotonic()
	if m2 < m1 {
		t.Errorf("got monotonic %v then %v, want non-decreasing", m1, m2)
	}
}
