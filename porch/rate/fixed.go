package rate

import (
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// fixedRule is FixedWindow: Limit per window, a window opening at a key's
// first request and closing Window later, when its count starts over.
type fixedRule struct {
	limit  int64
	window time.Duration
}

func (fixedRule) Algorithm() string                 { return "fixed" }
func (r fixedRule) Window() time.Duration           { return r.window }
func (fixedRule) Interval() time.Duration           { return 0 }
func (r fixedRule) life() time.Duration             { return r.window }
func (r fixedRule) most() int64                     { return r.limit }
func (r fixedRule) Expires(s store.State) time.Time { return s.Start.Add(r.window) }

func (r fixedRule) Advance(s store.State, now time.Time) store.State {
	if s.Start.IsZero() || !now.Before(s.Start.Add(r.window)) {
		return store.State{Start: now}
	}
	return s
}

func (r fixedRule) Room(s store.State, _ time.Time) int64 { return r.limit - s.Count }

func (r fixedRule) resetIn(s store.State, now time.Time) time.Duration {
	return max(s.Start.Add(r.window).Sub(now), 0)
}

// retryIn: a refused request fits once the window closes.
func (r fixedRule) retryIn(s store.State, now time.Time, _ int64) time.Duration {
	return r.resetIn(s, now)
}
