package algorithm

import (
	"fmt"
	"time"

	"github.com/writeonce/porch-go/porch/internal/counter"
)

// GCRA spaces requests window/limit apart as a steady rate, and lets a
// burst of them (the limit if zero) arrive at once: a token bucket, kept
// as one timestamp per key (see gcraRule).
var GCRA Algorithm = gcra{}

type gcra struct{}

func (gcra) Name() string { return "gcra" }

// Leases: a lease's hits would be answered later than the store counted
// them, which a token bucket would see as a burst: every hit is counted in
// the store.
func (gcra) Leases() bool { return false }

// Rule refuses a bucket so deep that its burst emission intervals span
// more than MaxWindow: the depth is a time the rule adds to instants, and
// must stay within MaxWindow, as a window does, so that no sum of times
// can wrap.
func (gcra) Rule(limit int64, window time.Duration, burst int64) (Rule, error) {
	g := newGCRA(limit, window, burst)
	if g.burst > int64(MaxWindow/g.interval) {
		return nil, fmt.Errorf("gcra: a burst whose intervals span at most %s, got burst %d of %s", time.Duration(MaxWindow), g.burst, g.interval)
	}
	return g, nil
}

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
// grows Count within an epoch, so a limiter's write-ahead covers GCRA as
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
func (r gcraRule) Limit() int64            { return r.limit }
func (r gcraRule) Window() time.Duration   { return r.window }
func (r gcraRule) Interval() time.Duration { return r.interval }

// Most: a client is told the bucket's depth, the most it can send at once.
func (r gcraRule) Most() int64  { return r.burst }
func (r gcraRule) Burst() int64 { return r.burst }

// Life: a Start is moved on once it is a Window old, at a request; with
// no request after that, its TAT is at most Burst intervals later.
func (r gcraRule) Life() time.Duration { return r.window + time.Duration(r.burst)*r.interval }

// tat is the state's theoretical arrival time.
func (r gcraRule) tat(s counter.State) time.Time {
	return s.Start.Add(time.Duration(s.Count) * r.interval)
}

func (r gcraRule) Expires(s counter.State) time.Time { return r.tat(s) }

func (r gcraRule) Advance(s counter.State, now time.Time) counter.State {
	if s.Start.IsZero() || !r.tat(s).After(now) {
		return counter.State{Start: now}
	}
	if e := now.Sub(s.Start); e >= r.window {
		k := min(int64(e/r.interval), s.Count)
		return counter.State{Start: s.Start.Add(time.Duration(k) * r.interval), Count: s.Count - k}
	}
	return s
}

// Room is Burst less the intervals the TAT lies ahead of now, rounded up.
func (r gcraRule) Room(s counter.State, now time.Time) int64 {
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

func (r gcraRule) ResetIn(s counter.State, now time.Time) time.Duration {
	return max(r.tat(s).Sub(now), 0)
}

// RetryIn: n fits once the TAT is at most (Burst − n) intervals ahead.
func (r gcraRule) RetryIn(s counter.State, now time.Time, n int64) time.Duration {
	return max(r.tat(s).Add(-time.Duration(r.burst-n)*r.interval).Sub(now), 0)
}

// Row stores the start rounded up to the millisecond, so that the TAT
// loaded back is never earlier than the one written.
func (r gcraRule) Row(key string, s counter.State, count int64) counter.Counter {
	c := counter.Counter{Key: key, State: counter.State{Start: CeilMS(s.Start), Count: count}, Window: r.window}
	c.Expires = CeilMS(r.Expires(c.State))
	return c
}

// Resume keeps a loaded row's TAT exactly, whatever policy wrote it, and
// moves its Start on by whole intervals until the TAT lies within Life of
// it. A state counted under another policy (a lower limit after a deploy:
// longer intervals) can hold a key back for longer than this policy's
// life, and a limiter's memory lets a key go at Start + Life: an idle
// pause would then have forgotten a client still held back.
func (r gcraRule) Resume(c counter.Counter, _ time.Time) counter.State {
	s := c.State
	if !r.tat(s).After(s.Start.Add(r.Life())) {
		return s
	}
	keep := int64(r.Life() / r.interval) // intervals that fit in one life
	k := s.Count - keep
	return counter.State{Start: s.Start.Add(time.Duration(k) * r.interval), Count: keep}
}

// Carried: the old epoch's newest row holds the client back until its
// TAT, at least prev plus bound intervals (a row stores the start rounded
// up, later still; a resumed state keeps the stored TAT exactly), and
// after a crash that row is loaded as the key's state: so it covers the
// new epoch's counts up to floor((prev + bound×T − next) / T), each of
// whose TATs comes no later.
func (r gcraRule) Carried(prev time.Time, bound int64, next time.Time) (int64, bool) {
	if bound <= 0 {
		return 0, true
	}
	tat := prev.Add(time.Duration(bound) * r.interval)
	return max(int64(tat.Sub(next)/r.interval), 0), true
}

// LeaseCutoff is never asked: GCRA does not lease.
func (gcraRule) LeaseCutoff(time.Duration) time.Duration { return time.Millisecond }
