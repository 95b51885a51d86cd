//go:build cgo

package sqlite

import (
	"context"
	"fmt"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// SQLite's synchronous levels the writer switches between.
const (
	synchronousFull   = "FULL"   // the WAL is fsynced at every commit
	synchronousNormal = "NORMAL" // the WAL is fsynced only at checkpoints
)

// batchSynchronous is the level batch commits with. Under
// store.SurvivesProcessCrash a batch of counts alone commits with NORMAL:
// in WAL mode a commit is then written to the WAL but not fsynced, which a
// kill -9 cannot undo (the operating system holds the pages) but a power
// loss can. Anything else in the batch (a stored response, an owner's or
// an application's statement, a deletion, Health's probe) must wait for the
// disk, so the batch commits with FULL, and its fsync of the WAL makes
// every frame before it durable too, counts of earlier NORMAL batches
// included: the WAL is recovered as a prefix, so after a power loss no
// response survives that a count before it did not.
func (s *Store) batchSynchronous(batch []commit.Op) string {
	if s.opt.Durability != store.SurvivesProcessCrash {
		return synchronousFull
	}
	for i := range batch {
		if o := &batch[i]; o.Counter == nil && !o.Dropped {
			return synchronousFull
		}
	}
	return synchronousNormal
}

// setSynchronous sets the writer's synchronous level, which SQLite allows
// only outside a transaction. It costs a statement only when the level
// changes: a server that counts and stores no response stays at one level.
func (s *Store) setSynchronous(ctx context.Context, level string) error {
	if s.synchronous == level {
		return nil
	}
	if _, err := s.wconn.ExecContext(ctx, "PRAGMA synchronous = "+level); err != nil {
		return fmt.Errorf("sqlite: set synchronous=%s: %w", level, err)
	}
	s.synchronous = level
	return nil
}
