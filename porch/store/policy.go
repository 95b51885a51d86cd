package store

import "github.com/writeonce/porch-go/porch/store/driver"

// ErrPolicyConflict is returned by ClaimPolicy when a limiter of the same
// name counts in the store under another limit or window: in this process,
// or, on PostgreSQL and Redis, in another instance that is still running.
// Two such limiters would write the same counter rows, each by its own
// rule, and neither count would be exact. On SQLite and the memory store,
// whose limiters each count in their own memory, a second limiter of one
// name is refused under the same policy too: the two would count apart.
// The error's text says which.
var ErrPolicyConflict = driver.ErrPolicyConflict
