package postgres

import (
	"context"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Health reports whether the store can commit; see sqlite.Store.Health,
// which answers the same way. The probe goes through the committer's
// connections, the ones that count, in a batch's transaction after its
// hits (see countHits): it locks the probe row last, so two instances'
// batches still lock rows in one order.
//
// Every committer answers (each its last outcome, or a probe of its own, at
// once): the store is healthy when all of them are, since each commits a
// share of the keys.
func (p *Store) Health(ctx context.Context) error {
	return eachCommitter(p.cs, func(c *commit.Committer) error { return c.Check(ctx) })
}
