package rate

import (
	"fmt"

	"github.com/writeonce/porch-go/porch/internal/algorithm"
)

// Algorithm is how a Limiter decides whether a request fits its limit.
// The zero value is FixedWindow. Every algorithm counts as exactly, as
// durably and on the same clocks as the others; they differ at a window's
// edges (see docs/algorithms.md).
type Algorithm uint8

// The algorithms (docs/algorithms.md compares them).
const (
	// FixedWindow allows Limit per window that opens at a key's first
	// request: simple and cheap, but a client may send Limit at the end
	// of one window and Limit more at the start of the next.
	FixedWindow Algorithm = iota
	// SlidingWindow allows a request while the previous window's count,
	// weighted by how much of that window still overlaps the last Window,
	// plus the current window's count stays within Limit: the estimate
	// go-chi/httprate uses, computed exactly.
	SlidingWindow
	// GCRA spaces requests Window/Limit apart as a steady rate, and lets
	// Options.Burst of them (Limit if zero) arrive at once: a token bucket,
	// kept as one timestamp per key.
	GCRA
)

// String is the algorithm's name: "fixed", "sliding" or "gcra".
func (a Algorithm) String() string {
	if alg, ok := algorithm.At(int(a)); ok {
		return alg.Name()
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm String names, for a flag or a
// config file.
func ParseAlgorithm(name string) (Algorithm, error) {
	if _, i, ok := algorithm.Lookup(name); ok {
		return Algorithm(i), nil
	}
	return 0, fmt.Errorf("rate: unknown algorithm %q (want %s)", name, algorithm.Names())
}

// rule is an algorithm with its policy: the driver.Rule a shared store
// applies, and what the limiter's headers and memory need besides.
type rule = algorithm.Rule
