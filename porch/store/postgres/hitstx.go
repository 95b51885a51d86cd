package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
)

// pgBegin is readCommitted's BEGIN, queued in a pipeline instead of spent
// on a round trip of its own.
const pgBegin = `BEGIN ISOLATION LEVEL READ COMMITTED`

// pgCommitAsync, queued after pgBegin, lets the transaction's COMMIT
// answer once the server has the commit in its WAL buffers, before they
// are flushed (see queueBegin).
const pgCommitAsync = `SET LOCAL synchronous_commit = off`

// queueBegin queues the transaction's BEGIN and, under
// store.SurvivesProcessCrash, pgCommitAsync, and returns how many
// results they answer. Only the committer's transactions take it: they
// carry rate-limit counts alone (an owner's writes and its response
// commit in the owner's own transaction, at the server's level). A
// batch carrying Health's probe takes it too: a probe at the server's
// level would wait for a synchronous standby, and every hit in its batch
// with it; Health proves the server's level with a probe of its own (see
// Health). A later transaction that waits for the flush (a stored
// response, another instance's batch) flushes this one's commit with its
// own, since the WAL is flushed in order.
func (p *Store) queueBegin(pl *pgx.Batch) int {
	pl.Queue(pgBegin)
	if p.opt.Durability != store.SurvivesProcessCrash {
		return 1
	}
	pl.Queue(pgCommitAsync)
	return 2
}

// hitsExec runs one statement in a transaction of its own on the
// committer's pool, at the level queueBegin gives the hits: take-backs
// and resets. Either one lost in a crash leaves a count as high as it was
// before it, the safe side, as a lost hit leaves it lower; and since the
// WAL is flushed in order, a hit counted after it is lost with it. At the
// server's level, one waiting for a synchronous standby would hold up the
// hits of its batch, which at SurvivesProcessCrash wait for none. The
// transaction is one pipeline, one round trip; if a statement fails, it
// is left open and aborted, and the pool closes the connection.
func (p *Store) hitsExec(ctx context.Context, sql string, args ...any) error {
	pl := &pgx.Batch{}
	begins := p.queueBegin(pl)
	pl.Queue(sql, args...)
	pl.Queue("COMMIT")
	br := p.writer.SendBatch(ctx, pl)
	defer br.Close()
	if err := readBegin(br, begins); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := readCommit(br); err != nil {
		return err
	}
	return br.Close()
}

// readCommit reads a pipelined COMMIT's result. COMMIT of an aborted
// transaction answers ROLLBACK, not an error: that is
// pgx.ErrTxCommitRollback.
func readCommit(br pgx.BatchResults) error {
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// readBegin reads the n results queueBegin queued.
func readBegin(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: begin: %w", err)
		}
	}
	return nil
}
