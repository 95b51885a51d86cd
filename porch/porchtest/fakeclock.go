// Package porchtest provides what tests of porch-based code need and
// production code must not, as net/http/httptest does for net/http: a
// [FakeClock] whose time moves only when told, and an [Observer] that counts
// what porch tells it.
//
//	clk := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))
//	st, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{Options: store.Options{Clock: clk}})
//	...
//	clk.Advance(time.Minute) // the window closes, without a sleep
package porchtest

import (
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// FakeClock is a clock.Clock for tests: time moves only when told. Advance
// moves both readings; Jump moves the wall clock alone, as an operator or
// NTP would. The zero value starts at the Unix epoch. It is safe for
// concurrent use.
type FakeClock struct {
	mu   sync.Mutex // protects the fields below
	wall time.Time
	mono time.Duration
}

var _ clock.Clock = (*FakeClock)(nil)

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
