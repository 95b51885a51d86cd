package postgres

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// pruneEvery is how often, at most, expired rows are deleted while there
// is no backlog of them.
const pruneEvery = 100 * time.Millisecond

// pruner paces the bounded prunes of expired rows that ride along with
// the store's writes: the committer's batches (counters and responses) and
// the owners' Saves (responses). Each write once carried them: at one or
// two connections, a write per request, they cost about as much as the
// write itself (an index scan per table, in every transaction) to delete
// nothing. Now a write carries them if pruneEvery has passed since the
// last prune began, or at once again while the last one found a full
// PruneRows of expired rows: under a backlog every write prunes, as
// before, so the tables are kept as small as they were; otherwise ten
// prunes a second. Safe for concurrent use: of the owners that find a
// prune due at once, one claims it.
type pruner struct {
	rows  int64        // store.Options.PruneRows; at most 0 never prunes
	epoch time.Time    // what next counts from, with its monotonic reading
	next  atomic.Int64 // nanoseconds after epoch: the first write at or after it prunes
}

func newPruner(rows int) *pruner { return &pruner{rows: int64(rows), epoch: time.Now()} }

// claim reports whether a write starting at now carries the prunes; if
// so, the next one waits pruneEvery unless pruned finds a backlog.
func (p *pruner) claim(now time.Time) bool {
	if p.rows <= 0 {
		return false
	}
	at := int64(now.Sub(p.epoch))
	for {
		n := p.next.Load()
		if at < n {
			return false
		}
		if p.next.CompareAndSwap(n, at+int64(pruneEvery)) {
			return true
		}
	}
}

// pruned records what a claimed prune deleted from one table: a full
// PruneRows means a backlog, which the next write prunes again.
func (p *pruner) pruned(deleted int64) {
	if deleted >= p.rows {
		p.next.Store(0)
	}
}

// claimPrunes claims the committer's prunes for b if they are due.
func (p *Store) claimPrunes(b *batchHits) {
	b.prune = p.prunes.claim(time.Now())
}

// queuePrunes queues on pl the prunes claimPrunes claimed for b.
func (p *Store) queuePrunes(pl *pgx.Batch, b *batchHits) {
	if b.prune {
		pl.Queue(pgPruneCounters, p.opt.PruneRows)
		pl.Queue(pgPruneResponses, p.opt.PruneRows)
	}
}

// readPrunes reads, from br, the answers to what queuePrunes queued.
func (b *batchHits) readPrunes(br pgx.BatchResults) error {
	if !b.prune {
		return nil
	}
	for i, table := range [...]string{"counters", "responses"} {
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("postgres: prune %s: %w", table, err)
		}
		b.pruned[i] = tag.RowsAffected()
	}
	return nil
}

// prunesCommitted tells the pacer what b's prunes deleted, once b has
// committed.
func (p *Store) prunesCommitted(b *batchHits) {
	if b.prune {
		p.prunes.pruned(max(b.pruned[0], b.pruned[1]))
	}
}

// queuePruneAfterSave queues Save's prune after its COMMIT, in a
// transaction of its own, so that its failure cannot take the stored
// response with it, and at synchronous_commit off, so that its commit
// waits for no synchronous standby and no disk flush: a prune lost in a
// crash only leaves expired rows for the next one. That is what makes it
// safe to pipeline. A Save past its bound has its connection closed and
// one cancel request sent, which the COMMIT uses up; the server then runs
// the prune for a client that has gone. At the server's level its commit
// would wait for a dead standby with nobody left to cancel it, one
// backend and its row locks per such Save; at off it finishes at once
// (its DELETE skips locked rows, so it waits for no lock either). Run
// after the answer instead, it would cost the owner a round trip of its
// own in every Save under a backlog.
func queuePruneAfterSave(b *pgx.Batch, rows int) {
	b.Queue(pgBegin)
	b.Queue(pgCommitAsync)
	b.Queue(pgPruneResponses, rows)
	b.Queue("COMMIT")
}

// readPruneAfterSave reads what queuePruneAfterSave queued and returns
// how many rows the prune deleted.
func readPruneAfterSave(br pgx.BatchResults) (int64, error) {
	if err := readBegin(br, 2); err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, err
	}
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
