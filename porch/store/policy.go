package store

import (
	"errors"
	"fmt"
	"time"
)

// ErrPolicyConflict is returned by ClaimPolicy when a limiter of the same
// name counts in the store under another limit or window: in this process,
// or, on PostgreSQL, in another instance that is still running. Two such
// limiters would write the same counter rows, each by its own rule, and
// neither count would be exact.
var ErrPolicyConflict = errors.New("store: a limiter of this name counts here under another policy")

// Policy is what a rate limiter counts under: Limit requests per Window, in
// the counter rows of Name.
type Policy struct {
	Name   string
	Limit  int64
	Window time.Duration
	// Algorithm is the Rule's: "fixed" (or "", as stored before there were
	// others), "sliding" or "gcra".
	Algorithm string
	// Burst is GCRA's burst; 0 for the other algorithms.
	Burst int64
}

// Equal reports whether p and q are one policy; an empty Algorithm is
// "fixed".
func (p Policy) Equal(q Policy) bool {
	return p.Name == q.Name && p.Limit == q.Limit && p.Window == q.Window &&
		p.algorithm() == q.algorithm() && p.Burst == q.Burst
}

func (p Policy) algorithm() string {
	if p.Algorithm == "" {
		return "fixed"
	}
	return p.Algorithm
}

// String formats p for errors and logs.
func (p Policy) String() string {
	s := fmt.Sprintf("%q: %d per %s", p.Name, p.Limit, p.Window)
	if a := p.algorithm(); a != "fixed" {
		s += ", " + a
	}
	if p.Burst > 0 {
		s += fmt.Sprintf(", burst %d", p.Burst)
	}
	return s
}
