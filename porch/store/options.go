package store

import (
	"log/slog"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// Options configure what every driver with a committer has: each driver's
// own Options embed them (sqlite.Options, postgres.Options,
// redis.Options), beside the knobs of that driver alone. A driver refuses,
// with an error from its Open, a field it would ignore. The zero value is
// ready to use.
type Options struct {
	// Clock supplies the wall and monotonic readings. If nil,
	// clock.System{}.
	Clock clock.Clock
	// QueueSize bounds the committer's queue; a write waits while it is
	// full. Size it in proportion to the pool (size × mailbox). If zero,
	// 16 × 1024, one write for every job a default porch.Pool's mailboxes
	// hold (16 actors of 1024 jobs).
	QueueSize int
	// MaxBatch caps the writes one transaction carries. If zero, 4096.
	MaxBatch int
	// PruneRows is how many expired rows of each table one commit deletes,
	// on SQLite and PostgreSQL. If zero, 64; negative disables pruning.
	// Redis expires porch's keys itself, and its Open refuses any other
	// value than zero.
	PruneRows int
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
	// Durability is what a rate-limit count must survive before its
	// verdict is answered. If zero, SurvivesPowerLoss. It never applies to
	// stored idempotent responses or an application's writes, which always
	// wait for the disk.
	Durability Durability
}

// Durability is what a rate-limit count survives once its verdict is
// answered: the trade durable databases offer as PostgreSQL's
// synchronous_commit and SQLite's synchronous. The zero value is
// SurvivesPowerLoss.
type Durability int

const (
	// SurvivesPowerLoss answers a verdict once its count is on disk
	// (fsynced): a power loss or a crash of the machine or of the
	// database server loses no count that was answered.
	SurvivesPowerLoss Durability = iota
	// SurvivesProcessCrash answers a verdict once its count has reached
	// the operating system (SQLite: committed to the WAL with
	// synchronous=NORMAL) or the database server (PostgreSQL: committed
	// with synchronous_commit off), without waiting for the disk. A kill
	// -9 of the application still loses nothing; a power loss, or on
	// PostgreSQL a crash of the server, may lose the last moments of
	// counts (see docs/deploying.md), and clients then get that much
	// allowance again. Stored idempotent responses and an application's
	// writes still wait for the disk, and each of them also makes every
	// count committed before it durable.
	SurvivesProcessCrash
)
