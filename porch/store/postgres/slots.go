package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/slotq"
)

var _ driver.SharedSlots = (*Store)(nil)

const (
	// pgLockSlots serializes the acquires of one key across every
	// instance: a transaction-scoped advisory lock on a hash of the key,
	// held until the acquire's transaction (one pipeline, see slotsTx)
	// commits. At synchronous_commit off that commit returns, and the lock
	// is released, without waiting for the WAL flush: one key's acquires
	// are serialized at the statements' latency, not the disk's. The seed (1) keeps these locks apart from idempotency
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

// Slots commit at synchronous_commit off, whatever Options.Durability
// says: a slot is volatile (driver.Slots), and an fsync per acquire, with
// the key's lock held through it, serialized one key's requests at the
// disk's latency. What a crash of the database (or a failover to a standby
// the commit had not reached) can then forget is the slot changes of its
// last moments, at most the WAL writer's three wal_writer_delay (600 ms
// by default) before it, in commit order:
//
//   - an acquire: its holder's request runs on without a row, so the key
//     may admit one request more than its limit per forgotten slot, for
//     as long as that holder's request runs. Its next renewal (within a
//     third of the lease) finds no row and reports the slot lost, which
//     the limiter logs; the row is not put back, since another request
//     may have its place.
//   - a release: the row comes back and holds its slot, unrenewed, for at
//     most one lease: a refusal, never an admission, too many.
//   - a renewal: the lease ends at its previous renewal's end, a lease
//     after a commit the crash did not forget, and the next renewal
//     extends it again.
//
// slotsTx is that transaction: BEGIN, SET LOCAL synchronous_commit =
// off, the statements, COMMIT, in one pipeline (one round trip).
func slotsTx(b *pgx.Batch) {
	b.Queue(pgBegin)
	b.Queue(pgCommitAsync)
}

// runSlotsTx sends b, which slotsTx began and whose statements follow,
// with its COMMIT; read reads the statements' results; it checks that the
// transaction committed. If a statement fails the transaction is left
// open and aborted, and the pool closes the connection, as hitsExec's.
func (p *Store) runSlotsTx(ctx context.Context, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	b.Queue("COMMIT")
	br := p.pool.SendBatch(ctx, b)
	defer br.Close()
	if err := readSlotsTx(br, read); err != nil {
		return err
	}
	return br.Close()
}

// readSlotsTx reads one transaction slotsTx began: its BEGIN, its
// statements (read), its COMMIT.
func readSlotsTx(br pgx.BatchResults, read func(br pgx.BatchResults) error) error {
	if err := readBegin(br, 2); err != nil {
		return err
	}
	if err := read(br); err != nil {
		return err
	}
	return readCommit(br)
}

// AcquireSlot takes one of limit slots of key for id, leased for lease on
// the database's clock: one transaction at synchronous_commit off (see
// slotsTx) that locks the key and then counts and inserts (see
// driver.SharedSlots), sent in the next pipeline of slot calls (see
// newSlotQueue). It is bounded by Options.Timeout.
func (p *Store) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (ok bool, held int64, err error) {
	c := &slotq.Call[slotOp]{Op: slotOp{key: dbKey(key), id: id, limit: limit, lease: lease.Milliseconds()}, Acquire: true}
	if err := p.slotq.Do(ctx, c); err != nil {
		return false, 0, fmt.Errorf("postgres: acquire slot: %w", err)
	}
	return c.Op.ok, c.Op.held, nil
}

// ReleaseSlot deletes id's slot of key, in a transaction at
// synchronous_commit off (see slotsTx) sent in the next pipeline of slot
// calls (see newSlotQueue), bounded by Options.Timeout.
func (p *Store) ReleaseSlot(ctx context.Context, key, id string) error {
	if err := p.slotq.Do(ctx, &slotq.Call[slotOp]{Op: slotOp{key: dbKey(key), id: id}}); err != nil {
		return fmt.Errorf("postgres: release slot: %w", err)
	}
	return nil
}

// maxSlotPipeline bounds the slot calls one pipeline carries, and
// slotSenders the pipelines in flight at once.
const (
	maxSlotPipeline = 64
	slotSenders     = 4
)

// newSlotQueue returns p's queue of slot calls (acquires, releases), which
// sends the calls of concurrent requests together: up to slotSenders
// goroutines each send every call queued in one pipeline of
// transactions, one per call, on one connection, one round trip. One
// key's acquires in one pipeline take and release its lock in one
// backend, without waking another; under load a round trip carries many.
// Each call is its own transaction, as before; a statement that fails
// fails the calls after it in its pipeline (the server skips them), each
// answered 503, and the pool closes the connection.
func (p *Store) newSlotQueue() *slotq.Queue[slotOp] {
	return &slotq.Queue[slotOp]{Send: p.sendSlots, Senders: slotSenders, Max: maxSlotPipeline, Timeout: p.opt.Timeout}
}

// slotOp is one slot call's arguments and, once settled, its outcome.
type slotOp struct {
	key   []byte
	id    string
	limit int64
	lease int64 // ms
	ok    bool
	held  int64
}

// sendSlots sends calls in one pipeline, a transaction each, bounded by
// Options.Timeout, and settles each.
func (p *Store) sendSlots(calls []*slotq.Call[slotOp]) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, c := range calls {
		slotsTx(b)
		if c.Acquire {
			b.Queue(pgLockSlots, c.Op.key)
			b.Queue(pgAcquireSlot, c.Op.key, c.Op.id, c.Op.limit, c.Op.lease)
		} else {
			b.Queue(pgReleaseSlot, c.Op.key, c.Op.id)
		}
		b.Queue("COMMIT")
	}
	br := p.pool.SendBatch(ctx, b)
	errs := make([]error, len(calls))
	var failed error
	for i, c := range calls {
		if failed != nil {
			errs[i] = failed
			continue
		}
		errs[i] = readSlotsTx(br, func(br pgx.BatchResults) error {
			if !c.Acquire {
				_, err := br.Exec()
				return err
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
			return br.QueryRow().Scan(&c.Op.held, &c.Op.ok)
		})
		if errs[i] != nil {
			failed = errs[i]
		}
	}
	if err := br.Close(); err != nil && failed == nil {
		for i := range errs {
			errs[i] = err
		}
	}
	for i, c := range calls {
		c.Settle(errs[i])
	}
}

// RenewSlots extends the leases of held in one statement, at
// synchronous_commit off (see slotsTx), bounded by Options.Timeout.
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
	b := &pgx.Batch{}
	slotsTx(b)
	b.Queue(pgRenewSlots, keys, ids, lease.Milliseconds())
	var tag pgconn.CommandTag
	err = p.runSlotsTx(ctx, b, func(br pgx.BatchResults) error {
		tag, err = br.Exec()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: renew slots: %w", err)
	}
	return len(held) - int(tag.RowsAffected()), nil
}
