package algorithm

import (
	"time"

	"github.com/writeonce/porch-go/porch/internal/counter"
)

// Sliding allows a request while the previous window's count, weighted by
// how much of that window still overlaps the last window, plus the current
// window's count stays within the limit: the estimate go-chi/httprate
// uses, computed exactly (see slidingRule).
var Sliding Algorithm = sliding{}

type sliding struct{}

func (sliding) Name() string { return "sliding" }

// Leases: a lease's hits are given back while the store still counts them
// in their own window (see slidingRule.LeaseCutoff).
func (sliding) Leases() bool { return true }

func (sliding) Rule(limit int64, window time.Duration, burst int64) (Rule, error) {
	if err := noBurst("sliding", burst); err != nil {
		return nil, err
	}
	return slidingRule{limit: limit, window: window}, nil
}

// slidingRule is Sliding. Windows of Window follow each other from a key's
// first request; at elapsed e into the current one, the estimate of what
// the last Window held is
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
func (r slidingRule) Limit() int64          { return r.limit }
func (r slidingRule) Window() time.Duration { return r.window }
func (slidingRule) Interval() time.Duration { return 0 }
func (r slidingRule) Life() time.Duration   { return 2 * r.window }
func (r slidingRule) Most() int64           { return r.limit }
func (slidingRule) Burst() int64            { return 0 }

// Advance rolls the windows over: one window on, the current count
// becomes the previous one; two or more, nothing is left.
func (r slidingRule) Advance(s counter.State, now time.Time) counter.State {
	if s.Start.IsZero() {
		return counter.State{Start: now}
	}
	e := now.Sub(s.Start)
	switch {
	case e < r.window:
		return s
	case e < 2*r.window:
		return counter.State{Start: s.Start.Add(r.window), Prev: s.Count}
	}
	return counter.State{Start: now}
}

// weight is the previous window's share of the estimate at now.
func (r slidingRule) weight(s counter.State, now time.Time) int64 {
	e := min(max(now.Sub(s.Start), 0), r.window)
	w, exact := MulDiv(s.Prev, int64(r.window-e), int64(r.window))
	if !exact {
		w++
	}
	return w
}

func (r slidingRule) Room(s counter.State, now time.Time) int64 {
	return r.limit - s.Count - r.weight(s, now)
}

// Expires: the current count weighs on the estimate until the window after
// it has passed; the previous one until the current window closes.
func (r slidingRule) Expires(s counter.State) time.Time {
	switch {
	case s.Count > 0:
		return s.Start.Add(2 * r.window)
	case s.Prev > 0:
		return s.Start.Add(r.window)
	}
	return s.Start
}

func (r slidingRule) ResetIn(s counter.State, now time.Time) time.Duration {
	return max(r.Expires(s).Sub(now), 0)
}

// RetryIn is when estimate + n first fits: later in this window, as the
// previous count's weight decays, if the current count leaves room for n;
// else in the next window, as the current count's weight decays there.
func (r slidingRule) RetryIn(s counter.State, now time.Time, n int64) time.Duration {
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
	q, _ := MulDiv(left, int64(r.window), prev) // left < prev: q < Window
	return r.window - time.Duration(q)
}

// Row stores the start rounded up to the millisecond, so that the state
// loaded back never holds back less than the one written, with the
// previous count and the moment it all stops weighing.
func (r slidingRule) Row(key string, s counter.State, count int64) counter.Counter {
	c := counter.Counter{Key: key, State: counter.State{Start: CeilMS(s.Start), Count: count, Prev: s.Prev}, Window: r.window}
	c.Expires = CeilMS(r.Expires(c.State))
	return c
}

func (r slidingRule) Resume(c counter.Counter, now time.Time) counter.State {
	return resumeWindow(c, r.window, now)
}

// Carried: a window that has moved on starts its own count.
func (slidingRule) Carried(time.Time, int64, time.Time) (int64, bool) { return 0, false }

// LeaseCutoff: a sliding window's unanswered hits weigh on the next window
// as its previous count. They are given back while the store still counts
// them in their own window, by the sweep after the cutoff, so the margin
// covers a sweep's period and its trip: two idle periods, or a quarter of
// a short window.
func (r slidingRule) LeaseCutoff(idle time.Duration) time.Duration {
	return max(min(2*idle, r.window/4), time.Millisecond)
}
