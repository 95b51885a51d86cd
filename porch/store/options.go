package store

import (
	"log/slog"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// Defaults for [Options].
const (
	// DefaultQueueSize is porch.DefaultPoolSize × porch.DefaultMailbox: the
	// committer can hold one write for every job the pool's mailboxes hold.
	// It is spelled out because the store does not import the framework;
	// a test holds the two equal.
	DefaultQueueSize = 16 * 1024
	DefaultMaxBatch  = 4096
	DefaultPruneRows = 64
	// DefaultExecBudget is long enough for an owner's few row writes,
	// which take well under a millisecond, even on a slow disk, and short
	// enough that a runaway statement costs every other request in its
	// batch no more than one slow commit.
	DefaultExecBudget = 50 * time.Millisecond
)

// Options configure a store, of either driver: sqlite.Open and
// postgres.Open take them. The zero value is ready to use.
type Options struct {
	// Clock supplies the wall and monotonic readings. If nil,
	// clock.System{}.
	Clock clock.Clock
	// QueueSize bounds the committer's queue; a write waits while it is
	// full. Size it in proportion to the pool (size × mailbox). If zero,
	// DefaultQueueSize.
	QueueSize int
	// MaxBatch caps the writes one transaction carries. If zero,
	// DefaultMaxBatch.
	MaxBatch int
	// PruneRows is how many expired rows of each table one commit deletes.
	// If zero, DefaultPruneRows; negative disables pruning.
	PruneRows int
	// KeyConns is how many idempotency keys one process may hold at once
	// on a shared store (PostgreSQL), one connection each for the owner's
	// handler's whole run; a reservation beyond it fails with ErrNoKeyConn
	// and its request answers 503. If zero, postgres.DefaultKeyConns.
	// SQLite holds keys in memory and ignores it.
	KeyConns int
	// ExecBudget bounds how long an application's statements may run
	// inside a SQLite commit: an idempotency owner's statements together,
	// or one sqlite.Store.Exec. They run on the committer, which every
	// write of the process shares, so while one runs every limiter hit and
	// every other response waits. Past the budget the statement is
	// interrupted (or, if it finished in one step SQLite cannot interrupt,
	// rolled back) and only its caller fails (ErrWriteFailed wrapping
	// ErrExecBudget for an owner; the middleware answers 500); the rest of
	// the batch commits. If zero, DefaultExecBudget; negative means no
	// budget. PostgreSQL runs owners' statements on their own connections,
	// off the committer, and ignores it.
	ExecBudget time.Duration
	// CommitDelay makes every commit take at least this long. It is fault
	// injection for tests and the acceptance gate (a slow disk); leave it
	// zero in production.
	CommitDelay time.Duration
	// Observer is told of every batch the committer ends. If nil, nothing
	// is observed.
	Observer Observer
	// Logger receives the store's warnings (a failed checkpoint, a prune
	// that failed, a changed rate policy). If nil, slog.Default() as of
	// each line.
	Logger *slog.Logger
}
