package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// countHits counts b in one transaction on conn, in two round trips
// instead of one per statement: the first pipelines BEGIN, the add-hits
// upsert, Health's probe (if the batch carries it) and the bounded prunes;
// the second, once the upsert's counts have settled every hit, pipelines
// the refund of refused hits (if any) with COMMIT. It is still one
// transaction that takes its row locks in key order, then the probe row's;
// the refund touches only rows it already holds, and the prunes skip
// locked rows, so running them before the refund changes nothing. If a
// statement fails, the server skips the rest of its pipeline, COMMIT
// included, and leaves the transaction open and aborted: conn must then
// not go back to the pool as it is (pgxpool closes a connection released
// inside a transaction, which rolls it back).
func (p *Store) countHits(ctx context.Context, conn *pgx.Conn, b *batchHits) error {
	first := &pgx.Batch{}
	b.begins = p.queueBegin(first)
	for i := range b.adds {
		first.Queue(addStatements[b.adds[i].algorithm], b.adds[i].args()...)
	}
	b.queueProbe(first)
	p.claimPrunes(b)
	p.queuePrunes(first, b)
	if err := p.sendFirst(ctx, conn, first, b); err != nil {
		return err
	}
	// Peeks read what the batch's hits left, in its transaction: a round
	// trip of their own, only in a batch that carries one.
	if err := peekHits(ctx, conn, b.peeks); err != nil {
		return err
	}
	second := &pgx.Batch{}
	if r := b.refunds(true); len(r.keys) > 0 {
		second.Queue(pgRefundHits, r.args()...)
	}
	second.Queue("COMMIT")
	br := conn.SendBatch(ctx, second)
	defer br.Close()
	if len(second.QueuedQueries) > 1 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: refund refused hits: %w", err)
		}
	}
	if err := readCommit(br); err != nil {
		return fmt.Errorf("postgres: commit hits: %w", err)
	}
	p.prunesCommitted(b)
	return br.Close()
}

// countFitting counts b, which fits, in one transaction and one round trip:
// BEGIN, pgAddFittingHits, Health's probe, the prunes and COMMIT in one
// pipeline, or, when the batch carries none of those, pgAddFittingAlone,
// one autocommit statement. pgAddFittingHits counts a key's hits only if
// all of them fit its limit (in arrival order, each hit's running total is
// then within its limit, so settle allows every one), and otherwise leaves
// its row as it is and does not return it: those keys' ops are returned,
// uncounted, for countHits' two round trips, in a transaction of their
// own. So nothing refused is ever committed, and no refund is needed
// before COMMIT. Locks are taken as in countHits: keys in order, then the
// probe row. On a statement's error the server skips the rest of the
// pipeline, COMMIT included, and the transaction is open and aborted, as
// in countHits (the autocommit statement has rolled back alone). An error
// in reading the answers here (a row that fails to scan, a key not asked
// for: a bug) may come after COMMIT was sent: the batch then fails with
// its hits counted, which only refuses more.
func (p *Store) countFitting(ctx context.Context, conn *pgx.Conn, b *batchHits) (rest []*commit.Op, err error) {
	g := &b.adds[0]
	args := []any{byteKeys(g.keys), g.windows, g.hits, g.held, g.limits}
	// The leases' settlement and adoption stand whether a key's hits fit
	// or not, so they are queued for every key; those left over are
	// counted with theirs cleared (see countIsolated).
	settles := b.refunds(true)
	p.claimPrunes(b)
	alone := len(settles.keys) == 0 && !b.probe && !b.prune
	if alone {
		// A statement alone, not a pipeline of one: pgx's pipeline is a
		// round of its own on the wire and in the process.
		rows, err := conn.Query(ctx, p.fittingAlone(), args...)
		if err != nil {
			return nil, fmt.Errorf("postgres: add fixed hits: %w", err)
		}
		if _, err := b.scanAdded(rows); err != nil {
			return nil, err
		}
	} else if err := p.countFittingTx(ctx, conn, b, args, settles); err != nil {
		return nil, err
	}
	if r := b.refunds(false); len(r.keys) > 0 {
		// Cannot happen (the statement counted only keys where every hit
		// fits, and settle agrees); if it did, the refused weight is
		// taken back at once, in a transaction of its own.
		if _, err := conn.Exec(ctx, pgRefundHits, r.args()...); err != nil {
			commit.Log(p.opt.Logger).Warn("postgres: refund refused hits", "err", err)
		}
	}
	for _, kh := range b.byKey {
		if !kh.seen {
			for _, h := range kh.ops {
				rest = append(rest, b.opOf[h])
			}
		}
	}
	return rest, nil
}

// countFittingTx is countFitting's transaction: BEGIN, the add
// statement with what else b carries, and COMMIT, in one pipeline.
func (p *Store) countFittingTx(ctx context.Context, conn *pgx.Conn, b *batchHits, args []any, settles refund) error {
	pl := &pgx.Batch{}
	begins := p.queueBegin(pl)
	pl.Queue(pgAddFittingHits, args...)
	if len(settles.keys) > 0 {
		pl.Queue(pgRefundHits, settles.args()...)
	}
	b.queueProbe(pl)
	p.queuePrunes(pl, b)
	pl.Queue("COMMIT")
	br := conn.SendBatch(ctx, pl)
	defer br.Close()
	if err := readBegin(br, begins); err != nil {
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("postgres: add fixed hits: %w", err)
	}
	if _, err := b.scanAdded(rows); err != nil {
		return err
	}
	if err := b.readFittingRest(br, len(settles.keys) > 0); err != nil {
		return err
	}
	p.prunesCommitted(b)
	return br.Close()
}

// fittingAlone is pgAddFittingAlone at the store's durability: the
// server's level, or off as queueBegin sets it.
func (p *Store) fittingAlone() string {
	if p.opt.Durability == store.SurvivesProcessCrash {
		return pgAddFittingAloneAsync
	}
	return pgAddFittingAlone
}

// queueProbe queues Health's probe on pl if b carries it.
func (b *batchHits) queueProbe(pl *pgx.Batch) {
	if b.probe {
		for _, q := range commit.ProbeSQL {
			pl.Queue(q)
		}
	}
}

// readProbe reads, from br, the answers to what queueProbe queued.
func (b *batchHits) readProbe(br pgx.BatchResults) error {
	if !b.probe {
		return nil
	}
	for range commit.ProbeSQL {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: health probe: %w", err)
		}
	}
	return nil
}

// readFittingRest reads the answers countFitting's transaction queued
// after its add statement, COMMIT's last.
func (b *batchHits) readFittingRest(br pgx.BatchResults, settles bool) error {
	if settles {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: settle leases: %w", err)
		}
	}
	if err := b.readProbe(br); err != nil {
		return err
	}
	if err := b.readPrunes(br); err != nil {
		return err
	}
	if err := readCommit(br); err != nil {
		return fmt.Errorf("postgres: commit hits: %w", err)
	}
	return nil
}

// sendFirst runs countHits' first pipeline and settles b from it.
func (p *Store) sendFirst(ctx context.Context, conn *pgx.Conn, first *pgx.Batch, b *batchHits) error {
	br := conn.SendBatch(ctx, first)
	defer br.Close()
	if err := readBegin(br, b.begins); err != nil {
		return err
	}
	for i := range b.adds {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("postgres: add %s hits: %w", b.adds[i].algorithm, err)
		}
		if err := b.scanAddHits(&b.adds[i], rows); err != nil {
			return err
		}
	}
	if err := b.readProbe(br); err != nil {
		return err
	}
	if err := b.readPrunes(br); err != nil {
		return err
	}
	return br.Close()
}
