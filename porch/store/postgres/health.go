package postgres

import "context"

// Health reports whether the store can commit; see sqlite.Store.Health,
// which answers the same way. The probe goes through the committer's
// connections, the ones that count, in a batch's transaction after its
// hits (see countHits): it locks the probe row last, so two instances'
// batches still lock rows in one order.
func (p *Store) Health(ctx context.Context) error { return p.c.Check(ctx) }
