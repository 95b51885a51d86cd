package rate

import (
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// gcraRule is GCRA, the generic cell rate algorithm: requests are spaced
// an emission interval T = Window/Limit apart (rounded up), and Burst of
// them may arrive at once. A key's theoretical arrival time (TAT) is when
// its bucket would be empty again; a request of weight n arriving at t fits
// while max(TAT, t) + n×T − t <= Burst×T, and moves TAT there.
//
// The TAT is kept in the shape every algorithm shares, as an epoch Start
// and the emissions Count counted since: TAT = Start + Count×T. An idle
// key (TAT in the past) starts a new epoch at its next request; a busy one
// moves its Start on by whole intervals once it is a Window old, which
// leaves the TAT where it was and keeps Count small. Counting only ever
// grows Count within an epoch, so the limiter's write-ahead covers GCRA as
// it covers a window's count.
type gcraRule struct {
	limit    int64
	window   time.Duration
	burst    int64
	interval time.Duration // T
}

func newGCRA(limit int64, window time.Duration, burst int64) gcraRule {
	if burst == 0 {
		burst = limit
	}
	t := window / time.Duration(limit)
	if t*time.Duration(limit) < window {
		t++ // rounded up: never more than Limit per Window
	}
	return gcraRule{limit: limit, window: window, burst: burst, interval: t}
}

func (gcraRule) Algorithm() string         { return "gcra" }
func (r gcraRule) Window() time.Duration   { return r.window }
func (r gcraRule) Interval() time.Duration { return r.interval }
func (r gcraRule) most() int64             { return r.burst }

// life: a Start is moved on once it is a Window old, at a request; with
// no request after that, its TAT is at most Burst intervals later.
func (r gcraRule) life() time.Duration { return r.window + time.Duration(r.burst)*r.interval }

// withinLife moves a loaded state's Start on by whole intervals, keeping
// its TAT, until the TAT lies within life() of it. A state counted under
// another policy (a lower limit after a deploy: longer intervals) can
// hold a key back for longer than this policy's life, and the limiter's
// memory lets a key go at Start + life: an idle pause would then have
// forgotten a client still held back.
func (r gcraRule) withinLife(s store.State) store.State {
	if !r.tat(s).After(s.Start.Add(r.life())) {
		return s
	}
	keep := int64(r.life() / r.interval) // intervals that fit in one life
	k := s.Count - keep
	return store.State{Start: s.Start.Add(time.Duration(k) * r.interval), Count: keep}
}

// tat is the state's theoretical arrival time.
func (r gcraRule) tat(s store.State) time.Time {
	return s.Start.Add(time.Duration(s.Count) * r.interval)
}

func (r gcraRule) Expires(s store.State) time.Time { return r.tat(s) }

func (r gcraRule) Advance(s store.State, now time.Time) store.State {
	if s.Start.IsZero() || !r.tat(s).After(now) {
		return store.State{Start: now}
	}
	if e := now.Sub(s.Start); e >= r.window {
		k := min(int64(e/r.interval), s.Count)
		return store.State{Start: s.Start.Add(time.Duration(k) * r.interval), Count: s.Count - k}
	}
	return s
}

// Room is Burst less the intervals the TAT lies ahead of now, rounded up.
func (r gcraRule) Room(s store.State, now time.Time) int64 {
	ahead := r.tat(s).Sub(now)
	if ahead <= 0 {
		return r.burst
	}
	owed := int64(ahead / r.interval)
	if ahead%r.interval != 0 {
		owed++
	}
	return r.burst - owed
}

func (r gcraRule) resetIn(s store.State, now time.Time) time.Duration {
	return max(r.tat(s).Sub(now), 0)
}

// retryIn: n fits once the TAT is at most (Burst − n) intervals ahead.
func (r gcraRule) retryIn(s store.State, now time.Time, n int64) time.Duration {
	return max(r.tat(s).Add(-time.Duration(r.burst-n)*r.interval).Sub(now), 0)
}
