package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store/driver"
)

var _ driver.SharedSlots = (*Store)(nil)

const (
	// pgLockSlots serializes the acquires of one key across every
	// instance: a transaction-scoped advisory lock on a hash of the key,
	// held until the acquire's transaction (one pipeline, one
	// Sync) ends. The seed (1) keeps these locks apart from idempotency
	// keys' (pgLockKey, seed 0); two keys whose hashes collide only wait
	// for each other.
	pgLockSlots = `SELECT pg_advisory_xact_lock(hashtextextended(encode($1::bytea, 'hex'), 1))`
	// pgAcquireSlot counts key's live slots, under pgLockSlots, and takes
	// one if fewer than $3 are live; expired ones are deleted on the way.
	// Every part reads the statement's one snapshot, taken after the lock
	// was granted, so it sees every acquire committed before. It returns
	// the slots held after it and whether it took one.
	pgAcquireSlot = `WITH clock AS (SELECT ` + pgClockMS + ` AS now_ms),
		gone AS (DELETE FROM porch_inflight WHERE key = $1 AND expires_at <= (SELECT now_ms FROM clock)),
		live AS (SELECT count(*) AS n FROM porch_inflight WHERE key = $1 AND expires_at > (SELECT now_ms FROM clock)),
		ins AS (INSERT INTO porch_inflight (key, slot, expires_at)
			SELECT $1, $2, (SELECT now_ms FROM clock) + $4 FROM live WHERE live.n < $3
			ON CONFLICT (key, slot) DO NOTHING
			RETURNING 1)
		SELECT (SELECT n FROM live) + (SELECT count(*) FROM ins), (SELECT count(*) FROM ins) > 0`
	pgReleaseSlot = `DELETE FROM porch_inflight WHERE key = $1 AND slot = $2`
	// pgRenewSlots extends every live slot named to $3 ms from now; an
	// expired one stays expired, for the next acquire of its key to
	// delete.
	pgRenewSlots = `UPDATE porch_inflight AS s SET expires_at = ` + pgClockMS + ` + $3
		FROM unnest($1::bytea[], $2::text[]) AS t (key, slot)
		WHERE s.key = t.key AND s.slot = t.slot AND s.expires_at > ` + pgClockMS
)

// SlotsShared reports true: every instance sharing the database counts
// the same slots (see driver.Slots).
func (p *Store) SlotsShared() bool { return true }

// AcquireSlot takes one of limit slots of key for id, leased for lease on
// the database's clock: one pipeline, in one READ COMMITTED transaction, that
// locks the key and then counts and inserts (see driver.SharedSlots). It
// is bounded by Options.Timeout.
func (p *Store) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (ok bool, held int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.opt.Timeout)
	defer cancel()
	k := dbKey(key)
	b := &pgx.Batch{}
	// READ COMMITTED whatever default_transaction_isolation says (see
	// readCommitted): under REPEATABLE READ the count would read a
	// snapshot taken before the lock wait, and admit past the limit.
	b.Queue(pgBegin)
	b.Queue(pgLockSlots, k)
	b.Queue(pgAcquireSlot, k, id, limit, lease.Milliseconds()).QueryRow(func(row pgx.Row) error {
		return row.Scan(&held, &ok)
	})
	b.Queue("COMMIT")
	if err := p.pool.SendBatch(ctx, b).Close(); err != nil {
		return false, 0, fmt.Errorf("postgres: acquire slot: %w", err)
	}
	return ok, held, nil
}

// ReleaseSlot deletes id's slot of key, bounded by Options.Timeout.
func (p *Store) ReleaseSlot(ctx context.Context, key, id string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opt.Timeout)
	defer cancel()
	if _, err := p.pool.Exec(ctx, pgReleaseSlot, dbKey(key), id); err != nil {
		return fmt.Errorf("postgres: release slot: %w", err)
	}
	return nil
}

// RenewSlots extends the leases of held in one statement, bounded by
// Options.Timeout.
func (p *Store) RenewSlots(ctx context.Context, held []driver.SlotRef, lease time.Duration) (lost int, err error) {
	if len(held) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.opt.Timeout)
	defer cancel()
	keys := make([][]byte, len(held))
	ids := make([]string, len(held))
	for i, h := range held {
		keys[i], ids[i] = dbKey(h.Key), h.ID
	}
	tag, err := p.pool.Exec(ctx, pgRenewSlots, keys, ids, lease.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("postgres: renew slots: %w", err)
	}
	return len(held) - int(tag.RowsAffected()), nil
}
