package postgres

import "time"

// pruneEvery is how often, at most, the committer's batches delete
// expired rows while there is no backlog of them.
const pruneEvery = 100 * time.Millisecond

// pruner paces the bounded prunes that ride in the committer's batches.
// Each batch once carried two: at one or two connections, a batch per
// request, they cost about as much as the hits' own upsert (two more
// index scans in every transaction) to delete nothing. Now a batch
// carries them once pruneEvery has passed since the last, or at once
// again while the last one found a full PruneRows of expired rows in
// either table: under a backlog every batch prunes, as before, so the
// tables are kept as small as they were; otherwise ten prunes a second.
// Only the committer's goroutine touches it.
type pruner struct {
	rows int64     // store.Options.PruneRows; at most 0 never prunes
	next time.Time // the first batch at or after it prunes
}

// due reports whether a batch starting at now carries the prunes.
func (p *pruner) due(now time.Time) bool { return p.rows > 0 && !now.Before(p.next) }

// pruned records a committed batch's prunes, started at now, and what
// they deleted from each table.
func (p *pruner) pruned(now time.Time, counters, responses int64) {
	if counters >= p.rows || responses >= p.rows {
		p.next = now // a backlog: the next batch prunes too
		return
	}
	p.next = now.Add(pruneEvery)
}
