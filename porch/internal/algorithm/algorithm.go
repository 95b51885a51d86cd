// Package algorithm holds the rate limiter's algorithms, each one complete
// in its own file: its name, the policies it accepts, the rule it counts by
// (a counter.Rule, which a shared store applies), what its limit and burst
// mean to a client, and how its state carries across a restart or a
// policy change. porch/rate selects one by name or by its Algorithm
// constant; store drivers and their conformance suite (porch/store/
// storetest) use the rules without importing the middleware.
//
// A new algorithm is a file here with a line in the table (see All), a
// statement in each shared driver, and nothing else.
package algorithm

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/internal/counter"
)

// MaxLimit and MaxWindow bound every policy (see rate.MaxLimit and
// rate.MaxWindow, which are these): an algorithm's spans and counts stay
// far from int64's and time.Duration's range within them.
const (
	MaxLimit  = 1 << 40
	MaxWindow = 100 * 365 * 24 * time.Hour
)

// Algorithm is one way of counting requests against a limit.
type Algorithm interface {
	// Name names it in flags, stored policies and a shared store's
	// statements: what its rules' Algorithm returns.
	Name() string
	// Rule returns the rule of limit (1 to MaxLimit) per window (whole
	// milliseconds, up to MaxWindow) with burst (0 to MaxLimit, 0 meaning
	// none was asked for), or an error saying why the algorithm cannot
	// count under that policy.
	Rule(limit int64, window time.Duration, burst int64) (Rule, error)
	// Leases reports whether a limiter on a shared store may count this
	// algorithm's hits ahead in the store and answer them later from
	// memory: sound where a hit answered later than it was counted is
	// still within the limit it was counted under.
	Leases() bool
}

// Rule is an algorithm with its policy: the counter.Rule a shared store
// applies, and what a limiter needs besides to answer clients, keep
// states in memory and write them to an exclusive store.
type Rule interface {
	counter.Rule
	// Limit is the policy's limit per Window, as a stored policy records
	// it.
	Limit() int64
	// Most is the heaviest request that can ever fit, and what a client
	// is told its limit is: the limit, or a bucket's burst.
	Most() int64
	// Burst is what a stored policy records beside limit and window (the
	// burst the rule counts with); 0 for an algorithm without one.
	Burst() int64
	// ResetIn is how long from now s takes to hold nothing back: when the
	// client's full allowance is back (X-RateLimit-Reset, RateLimit's t).
	ResetIn(s counter.State, now time.Time) time.Duration
	// RetryIn is how long from now a request of weight n (at most Most)
	// must wait to fit: a refusal's Retry-After.
	RetryIn(s counter.State, now time.Time, n int64) time.Duration
	// Life bounds how long after its Start a state can hold anything
	// back, so that a limiter's memory can let keys go in the order they
	// opened.
	Life() time.Duration
	// Row is the counter row an exclusive store keeps for key's state s
	// counted up to count: loaded back (see Resume), it never holds the
	// client back less than s with that count.
	Row(key string, s counter.State, count int64) counter.Counter
	// Resume is the state a loaded row counts on from, at now: a row this
	// rule wrote, or one written under another policy of the same name (a
	// deploy changed it), which must neither forget the client's hits nor
	// hold it back longer than either policy would.
	Resume(c counter.Counter, now time.Time) counter.State
	// Carried reports, for a key whose state moved from the epoch started
	// at prev to a new one started at next, how many of the new epoch's
	// counts a row written for the old epoch with count bound already
	// covers, and whether epochs carry over at all. A window's do not: a
	// closed window holds nothing back. A bucket's do: its old epoch's row
	// holds the client back until the bucket's theoretical arrival time,
	// which a crash reloads.
	Carried(prev time.Time, bound int64, next time.Time) (covered int64, carries bool)
	// LeaseCutoff is how long before its epoch ends (Start + Window) a
	// lease of Leases algorithm stops answering hits it holds, given that
	// idle leases are given back every idle: after that, the store would
	// count the hit elsewhere than where the lease's hit was counted.
	LeaseCutoff(idle time.Duration) time.Duration
}

// table is every algorithm, in the order of rate's Algorithm constants:
// FixedWindow, SlidingWindow, GCRA. The first is the default.
var (
	mu    sync.RWMutex
	table = []Algorithm{Fixed, Sliding, GCRA}
)

// All returns the algorithms in the table's order.
func All() []Algorithm {
	mu.RLock()
	defer mu.RUnlock()
	return append([]Algorithm(nil), table...)
}

// At returns the i-th algorithm of the table, and whether there is one.
func At(i int) (Algorithm, bool) {
	mu.RLock()
	defer mu.RUnlock()
	if i < 0 || i >= len(table) {
		return nil, false
	}
	return table[i], true
}

// Lookup returns the algorithm named name and its place in the table.
func Lookup(name string) (a Algorithm, i int, ok bool) {
	mu.RLock()
	defer mu.RUnlock()
	for i, a := range table {
		if a.Name() == name {
			return a, i, true
		}
	}
	return nil, 0, false
}

// Names lists the table's names as a sentence for a message: "fixed,
// sliding or gcra".
func Names() string {
	var names []string
	for _, a := range All() {
		names = append(names, a.Name())
	}
	return list(names)
}

// NamesIf is Names of the algorithms f reports true for.
func NamesIf(f func(Algorithm) bool) string {
	var names []string
	for _, a := range All() {
		if f(a) {
			names = append(names, a.Name())
		}
	}
	return list(names)
}

func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Register adds a to the table, for a test that counts with an algorithm
// of its own, and returns its place and a func that takes it out again.
// It fails for a name the table has.
func Register(a Algorithm) (i int, unregister func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	for _, b := range table {
		if b.Name() == a.Name() {
			return 0, nil, fmt.Errorf("algorithm: %q is registered already", a.Name())
		}
	}
	table = append(table, a)
	i = len(table) - 1
	return i, func() {
		mu.Lock()
		defer mu.Unlock()
		table = append(table[:i:i], table[i+1:]...)
	}, nil
}

// MulDiv returns a*b/c rounded down, and whether it was exact, for
// non-negative a, b and positive c with a*b/c < 2^63: 128-bit arithmetic,
// since a count times a window in nanoseconds overflows int64.
func MulDiv(a, b, c int64) (q int64, exact bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	uq, r := bits.Div64(hi, lo, uint64(c))
	return int64(uq), r == 0
}

// CeilMS rounds t up to the millisecond, the stores' resolution, so that
// a state stored and loaded back never holds back less than it did.
func CeilMS(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// WholeMS rounds a window up to the millisecond, the stores' resolution:
// a window with a remainder would be stored rounded down, and close early
// after a restart.
func WholeMS(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		return d + time.Millisecond - r
	}
	return d
}

// MustRule is a's rule of limit per window (rounded up to the millisecond,
// as rate.New does) with burst, for tests; it panics on a policy a
// refuses.
func MustRule(a Algorithm, limit int64, window time.Duration, burst int64) Rule {
	r, err := a.Rule(limit, WholeMS(window), burst)
	if err != nil {
		panic(fmt.Sprintf("algorithm: %s, %d per %s, burst %d: %v", a.Name(), limit, window, burst, err))
	}
	return r
}

// noBurst refuses a burst for an algorithm that has none.
func noBurst(name string, burst int64) error {
	if burst != 0 {
		return fmt.Errorf("%s has no burst, got burst %d", name, burst)
	}
	return nil
}

// resumeWindow is where a loaded window starts under a window of window.
// A window opened under another length (the policy changed in a deploy)
// keeps its count and closes at its old end or one new window from now,
// whichever is sooner: so a client is never held longer than either
// policy would hold it, and its hits are not forgotten. Every window of a
// limiter then has one length, which a limiter's memory relies on.
func resumeWindow(c counter.Counter, window time.Duration, now time.Time) counter.State {
	s := c.State
	if c.Window == window {
		return s
	}
	end := c.Start.Add(c.Window)
	if limit := now.Add(window); limit.Before(end) {
		end = limit
	}
	s.Start = end.Add(-window)
	return s
}
