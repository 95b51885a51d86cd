package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
	if b.probe {
		for _, q := range commit.ProbeSQL {
			first.Queue(q)
		}
	}
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
	tag, err := br.Exec()
	if err != nil {
		return fmt.Errorf("postgres: commit hits: %w", err)
	}
	if tag.String() != "COMMIT" {
		// COMMIT of an aborted transaction answers ROLLBACK, not an error.
		return fmt.Errorf("postgres: commit hits: %w", pgx.ErrTxCommitRollback)
	}
	p.prunesCommitted(b)
	return br.Close()
}

// countFitting counts b, which fits, in one transaction and one round trip:
// BEGIN, pgAddFittingHits, Health's probe, the prunes and COMMIT in one
// pipeline. pgAddFittingHits counts a key's hits only if all of them fit
// its limit (in arrival order, each hit's running total is then within
// its limit, so settle allows every one), and otherwise leaves its row as
// it is and does not return it: those keys' ops are returned, uncounted,
// for countHits' two round trips, in a transaction of their own. So
// nothing refused is ever committed, and no refund is needed before
// COMMIT. Locks are taken as in countHits: keys in order, then the probe
// row. On a statement's error the server skips the rest of the pipeline,
// COMMIT included, and the transaction is open and aborted, as in
// countHits. An error in reading the answers here (a row that fails to
// scan, a key not asked for: a bug) may come after COMMIT was sent: the
// batch then fails with its hits counted, which only refuses more.
func (p *Store) countFitting(ctx context.Context, conn *pgx.Conn, b *batchHits) (rest []*commit.Op, err error) {
	g := &b.adds[0]
	pl := &pgx.Batch{}
	begins := p.queueBegin(pl)
	pl.Queue(pgAddFittingHits, byteKeys(g.keys), g.windows, g.hits, g.held, g.limits)
	// The leases' settlement and adoption stand whether a key's hits fit
	// or not, so they are queued for every key; those left over are
	// counted with theirs cleared (see countIsolated).
	settles := b.refunds(true)
	if len(settles.keys) > 0 {
		pl.Queue(pgRefundHits, settles.args()...)
	}
	if b.probe {
		for _, q := range commit.ProbeSQL {
			pl.Queue(q)
		}
	}
	p.queuePrunes(pl, b)
	pl.Queue("COMMIT")
	br := conn.SendBatch(ctx, pl)
	defer br.Close()
	if err := readBegin(br, begins); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("postgres: add fixed hits: %w", err)
	}
	for rows.Next() {
		var key []byte
		var count, prev, startMS, nowMS int64
		if err := rows.Scan(&key, &count, &prev, &startMS, &nowMS); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: add hits: %w", err)
		}
		kh := b.byKey[string(key)]
		if kh == nil || kh.seen {
			rows.Close()
			return nil, fmt.Errorf("postgres: add hits: unexpected key %q returned", key)
		}
		kh.seen = true
		kh.settle(count, prev, time.UnixMilli(startMS), time.UnixMilli(nowMS))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: add hits: %w", err)
	}
	if len(settles.keys) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("postgres: settle leases: %w", err)
		}
	}
	if b.probe {
		for range commit.ProbeSQL {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("postgres: health probe: %w", err)
			}
		}
	}
	if err := b.readPrunes(br); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("postgres: commit hits: %w", err)
	}
	if tag.String() != "COMMIT" {
		return nil, fmt.Errorf("postgres: commit hits: %w", pgx.ErrTxCommitRollback)
	}
	p.prunesCommitted(b)
	if err := br.Close(); err != nil {
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
	if b.probe {
		for range commit.ProbeSQL {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("postgres: health probe: %w", err)
			}
		}
	}
	if err := b.readPrunes(br); err != nil {
		return err
	}
	return br.Close()
}
