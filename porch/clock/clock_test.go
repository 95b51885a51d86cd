package clock_test

import (
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

func TestSystem(t *testing.T) {
	var c clock.System
	before := time.Now()
	got := c.Wall()
	after := time.Now()
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
