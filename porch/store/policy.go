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
}

// String formats p for errors and logs.
func (p Policy) String() string { return fmt.Sprintf("%q: %d per %s", p.Name, p.Limit, p.Window) }
