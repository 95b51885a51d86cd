//go:build cgo

package sqlite

import (
	"errors"
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// defaultExecBudget is Options.ExecBudget's default.
const defaultExecBudget = 50 * time.Millisecond

// ErrExecBudget is wrapped in the error of a statement that ran past
// Options.ExecBudget: an idempotency owner's (with store.ErrWriteFailed)
// or an Exec's. SQLite interrupted it, or it finished late, in a step
// SQLite cannot interrupt, and was rolled back. Either way nothing of it
// is stored.
var ErrExecBudget = errors.New("sqlite: the statement ran past its time budget (sqlite.Options.ExecBudget)")

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Options are the committer's, which every driver has: Clock,
	// QueueSize, MaxBatch, PruneRows, CommitDelay, Observer and Logger.
	store.Options
	// ExecBudget bounds how long an application's statements may run
	// inside a commit: an idempotency owner's statements together, or one
	// Store.Exec. They run on the committer, which every write of the
	// process shares, so while one runs every limiter hit and every other
	// response waits. Past the budget the statement is interrupted (or, if
	// it finished in one step SQLite cannot interrupt, rolled back) and
	// only its caller fails (store.ErrWriteFailed wrapping ErrExecBudget
	// for an owner; the middleware answers 500); the rest of the batch
	// commits. If zero, 50 ms: long enough for an owner's few row writes,
	// which take well under a millisecond, even on a slow disk, and short
	// enough that a runaway statement costs every other request in its
	// batch no more than one slow commit. Negative means no budget.
	ExecBudget time.Duration
}
