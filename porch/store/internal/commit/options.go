package commit

import (
	"fmt"
	"log/slog"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
)

// The defaults of store.Options, as its fields document them. QueueSize's
// is a default porch.Pool's capacity, actor.DefaultSize ×
// actor.DefaultMailbox, spelled out because the store does not import the
// framework; a test holds the two equal.
const (
	DefaultQueueSize = 16 * 1024
	DefaultMaxBatch  = 4096
	DefaultPruneRows = 64
)

// WithDefaults returns o with every zero field that has a default set to
// it. A driver's own options (sqlite.Options.ExecBudget,
// postgres.Options.KeyConns) are that driver's to default.
func WithDefaults(o store.Options) store.Options {
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.PruneRows == 0 {
		o.PruneRows = DefaultPruneRows
	}
	return o
}

// Log is the logger for a driver's line: l (store.Options.Logger), or if
// nil slog.Default() as of this call.
func Log(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

// CheckDurability refuses a store.Durability that names no level, so
// that a value the store does not know is never taken for one it does.
// driver prefixes the error ("sqlite", "postgres", "redis").
func CheckDurability(driver string, d store.Durability) error {
	switch d {
	case store.SurvivesPowerLoss, store.SurvivesProcessCrash:
		return nil
	}
	return fmt.Errorf("%s: Options.Durability must be store.SurvivesPowerLoss or store.SurvivesProcessCrash, got %d", driver, int(d))
}
