package algorithm

import (
	"time"

	"github.com/writeonce/porch-go/porch/internal/counter"
)

// Fixed allows limit per window that opens at a key's first request:
// simple and cheap, but a client may send the limit at the end of one
// window and the limit again at the start of the next.
var Fixed Algorithm = fixed{}

type fixed struct{}

func (fixed) Name() string { return "fixed" }

// Leases: a lease's hits belong to the window they were counted in, and
// weigh on nothing once it closes.
func (fixed) Leases() bool { return true }

func (fixed) Rule(limit int64, window time.Duration, burst int64) (Rule, error) {
	if err := noBurst("fixed", burst); err != nil {
		return nil, err
	}
	return fixedRule{limit: limit, window: window}, nil
}

// fixedRule is Fixed: limit per window, a window opening at a key's first
// request and closing window later, when its count starts over.
type fixedRule struct {
	limit  int64
	window time.Duration
}

func (fixedRule) Algorithm() string                   { return "fixed" }
func (r fixedRule) Limit() int64                      { return r.limit }
func (r fixedRule) Window() time.Duration             { return r.window }
func (fixedRule) Interval() time.Duration             { return 0 }
func (r fixedRule) Life() time.Duration               { return r.window }
func (r fixedRule) Most() int64                       { return r.limit }
func (fixedRule) Burst() int64                        { return 0 }
func (r fixedRule) Expires(s counter.State) time.Time { return s.Start.Add(r.window) }

func (r fixedRule) Advance(s counter.State, now time.Time) counter.State {
	if s.Start.IsZero() || !now.Before(s.Start.Add(r.window)) {
		return counter.State{Start: now}
	}
	return s
}

func (r fixedRule) Room(s counter.State, _ time.Time) int64 { return r.limit - s.Count }

func (r fixedRule) ResetIn(s counter.State, now time.Time) time.Duration {
	return max(s.Start.Add(r.window).Sub(now), 0)
}

// RetryIn: a refused request fits once the window closes.
func (r fixedRule) RetryIn(s counter.State, now time.Time, _ int64) time.Duration {
	return r.ResetIn(s, now)
}

// Row keeps the window's start as it is, and leaves Expires to the store,
// which computes the window's close, as it always has.
func (r fixedRule) Row(key string, s counter.State, count int64) counter.Counter {
	return counter.Counter{Key: key, State: counter.State{Start: s.Start, Count: count}, Window: r.window}
}

func (r fixedRule) Resume(c counter.Counter, now time.Time) counter.State {
	return resumeWindow(c, r.window, now)
}

// Carried: a closed window holds nothing back, so a new one starts over.
func (fixedRule) Carried(time.Time, int64, time.Time) (int64, bool) { return 0, false }

// LeaseCutoff: a fixed window's unanswered hits weigh on nothing once it
// closes, so a millisecond (the stores' resolution) is enough.
func (fixedRule) LeaseCutoff(time.Duration) time.Duration { return time.Millisecond }
