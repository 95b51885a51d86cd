package store

import "errors"

// ErrPolicyConflict is returned by ClaimPolicy when a limiter of the same
// name counts in the store under another limit or window: in this process,
// or, on PostgreSQL, in another instance that is still running. Two such
// limiters would write the same counter rows, each by its own rule, and
// neither count would be exact.
var ErrPolicyConflict = errors.New("store: a limiter of this name counts here under another policy")
