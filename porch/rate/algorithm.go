package rate

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// Algorithm is how a Limiter decides whether a request fits its limit.
// The zero value is FixedWindow. Every algorithm counts as exactly, as
// durably and on the same clocks as the others; they differ at a window's
// edges (see docs/algorithms.md).
type Algorithm uint8

const (
	// FixedWindow allows Limit per window that opens at a key's first
	// request: simple and cheap, but a client may send Limit at the end
	// of one window and Limit more at the start of the next.
	FixedWindow Algorithm = iota
	// SlidingWindow allows a request while the previous window's count,
	// weighted by how much of that window still overlaps the last Window,
	// plus the current window's count stays within Limit: the estimate
	// go-chi/httprate uses, computed exactly (see slidingRule).
	SlidingWindow
	// GCRA spaces requests Window/Limit apart as a steady rate, and lets
	// Options.Burst of them (Limit if zero) arrive at once: a token bucket,
	// kept as one timestamp per key (see gcraRule).
	GCRA
)

// String is the algorithm's name: "fixed", "sliding" or "gcra".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed"
	case SlidingWindow:
		return "sliding"
	case GCRA:
		return "gcra"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm String names, for a flag or a
// config file.
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, GCRA} {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("rate: unknown algorithm %q (want fixed, sliding or gcra)", name)
}

// rule is an algorithm with its policy: the store.Rule a shared store
// applies, and what the limiter's headers and memory need besides.
type rule interface {
	store.Rule
	// resetIn is how long from now s takes to hold nothing back: when the
	// client's full allowance is back (X-RateLimit-Reset, RateLimit's t).
	resetIn(s store.State, now time.Time) time.Duration
	// retryIn is how long from now a request of weight n (at most most())
	// must wait to fit: a refusal's Retry-After.
	retryIn(s store.State, now time.Time, n int64) time.Duration
	// life bounds how long after its Start a state can hold anything back,
	// so that a limiter's memory can let keys go in the order they opened.
	life() time.Duration
	// most is the heaviest request that can ever fit: Limit, or the burst.
	most() int64
}

// newRule is the rule of algorithm a for limit per window; New has
// checked the arguments.
func newRule(a Algorithm, limit int64, window time.Duration, burst int64) rule {
	switch a {
	case SlidingWindow:
		return slidingRule{limit: limit, window: window}
	case GCRA:
		return newGCRA(limit, window, burst)
	}
	return fixedRule{limit: limit, window: window}
}

// mulDiv returns a*b/c rounded down, and whether it was exact, for
// non-negative a, b and positive c with a*b/c < 2^63: 128-bit arithmetic,
// since a count times a window in nanoseconds overflows int64.
func mulDiv(a, b, c int64) (q int64, exact bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	uq, r := bits.Div64(hi, lo, uint64(c))
	return int64(uq), r == 0
}

// ceilMS rounds t up to the millisecond, the stores' resolution, so that
// a state stored and loaded back never holds back less than it did.
func ceilMS(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// NewRule returns the store.Rule a Limiter of algorithm a, limit per window
// and burst (GCRA only; 0 is the limit) hands its store: for a store
// driver's tests (see porch/store/storetest), which must decide exactly as
// the limiter does. It panics on arguments New would refuse.
func NewRule(a Algorithm, limit int, window time.Duration, burst int) store.Rule {
	if a > GCRA || limit < 1 || window < time.Millisecond || burst < 0 || (burst != 0 && a != GCRA) {
		panic(fmt.Sprintf("rate: NewRule: invalid rule %s, %d per %s, burst %d", a, limit, window, burst))
	}
	return newRule(a, int64(limit), wholeMS(window), int64(burst))
}

// wholeMS rounds a window up to the millisecond, the stores' resolution
// (see New).
func wholeMS(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		return d + time.Millisecond - r
	}
	return d
}
