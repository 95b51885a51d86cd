package rate

import (
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// slidingRule is SlidingWindow. Windows of Window follow each other from a
// key's first request; at elapsed e into the current one, the estimate of
// what the last Window held is
//
//	ceil(Prev × (Window − e) / Window) + Count
//
// the previous window's count weighted by how much of it the last Window
// still overlaps, rounded up (the safe side), plus the current count. A
// request of weight n fits while estimate + n <= Limit. It assumes the
// previous window's hits were spread evenly: a client that sent all of
// them at its very end can get up to Limit more within one Window, where
// a fixed window allows 2 × Limit. The arithmetic is exact (128-bit), so
// two limiters, or a limiter and the database, always agree.
type slidingRule struct {
	limit  int64
	window time.Duration
}

func (slidingRule) Algorithm() string       { return "sliding" }
func (r slidingRule) Window() time.Duration { return r.window }
func (slidingRule) Interval() time.Duration { return 0 }
func (r slidingRule) life() time.Duration   { return 2 * r.window }
func (r slidingRule) most() int64           { return r.limit }

// Advance rolls the windows over: one window on, the current count
// becomes the previous one; two or more, nothing is left.
func (r slidingRule) Advance(s store.State, now time.Time) store.State {
	if s.Start.IsZero() {
		return store.State{Start: now}
	}
	e := now.Sub(s.Start)
	switch {
	case e < r.window:
		return s
	case e < 2*r.window:
		return store.State{Start: s.Start.Add(r.window), Prev: s.Count}
	}
	return store.State{Start: now}
}

// weight is the previous window's share of the estimate at now.
func (r slidingRule) weight(s store.State, now time.Time) int64 {
	e := min(max(now.Sub(s.Start), 0), r.window)
	w, exact := mulDiv(s.Prev, int64(r.window-e), int64(r.window))
	if !exact {
		w++
	}
	return w
}

func (r slidingRule) Room(s store.State, now time.Time) int64 {
	return r.limit - s.Count - r.weight(s, now)
}

// Expires: the current count weighs on the estimate until the window after
// it has passed; the previous one until the current window closes.
func (r slidingRule) Expires(s store.State) time.Time {
	switch {
	case s.Count > 0:
		return s.Start.Add(2 * r.window)
	case s.Prev > 0:
		return s.Start.Add(r.window)
	}
	return s.Start
}

func (r slidingRule) resetIn(s store.State, now time.Time) time.Duration {
	return max(r.Expires(s).Sub(now), 0)
}

// retryIn is when estimate + n first fits: later in this window, as the
// previous count's weight decays, if the current count leaves room for n;
// else in the next window, as the current count's weight decays there.
func (r slidingRule) retryIn(s store.State, now time.Time, n int64) time.Duration {
	e := min(max(now.Sub(s.Start), 0), r.window)
	if left := r.limit - s.Count - n; left >= 0 {
		return max(r.decayed(s.Prev, left)-e, 0)
	}
	return r.window - e + r.decayed(s.Count, r.limit-n)
}

// decayed is the elapsed time into a window at which ceil(prev × (Window −
// e) / Window) <= left first holds: prev × (Window − e) <= left × Window.
func (r slidingRule) decayed(prev, left int64) time.Duration {
	if prev <= left {
		return 0
	}
	q, _ := mulDiv(left, int64(r.window), prev) // left < prev: q < Window
	return r.window - time.Duration(q)
}
