package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Health reports whether the store can commit; see sqlite.Store.Health,
// which answers the same way. The probe goes through the committer's
// connections, the ones that count.
func (p *Store) Health(ctx context.Context) error { return p.c.Check(ctx) }

// writeProbe runs inside a batch's transaction, after its hits: it locks
// the probe row last, so two instances' batches still lock rows in one
// order.
func writeProbe(ctx context.Context, tx pgx.Tx) error {
	for _, q := range commit.ProbeSQL {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: health probe: %w", err)
		}
	}
	return nil
}
