package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// resetHits empties the open windows of keys and starts them over, in a
// transaction of its own that commits before the batch's hits are counted.
// Its own, so that every porch transaction still takes its row locks in one
// sorted statement: a reset statement before the hits' upsert in one
// transaction would lock its keys out of order with the upsert's, and two
// instances doing that at once could deadlock. Counting the batch's hits
// after the resets is an order their callers could have seen, since none of
// them has been answered yet. It commits at the hits' level (see hitsExec).
func (p *Store) resetHits(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	db := make([]string, len(keys))
	for i, k := range keys {
		db[i] = string(dbKey(k))
	}
	slices.Sort(db)
	db = slices.Compact(db)
	err := p.hitsExec(ctx, pgResetHits, byteKeys(db))
	if err != nil {
		err = fmt.Errorf("postgres: reset counters: %w", err)
	}
	return p.late(ctx, "reset counters", err)
}

// peekHits reads the counters peeks ask for, in tx after its hits were
// counted, and fills in each peek's Result. It takes no lock: a read cannot
// deadlock, and it sees what tx and the transactions before it committed.
func peekHits(ctx context.Context, tx interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, peeks []*commit.Hit) error {
	if len(peeks) == 0 {
		return nil
	}
	keys := make([][]byte, 0, len(peeks))
	asked := make(map[string]bool, len(peeks)) // by dbKey
	for _, h := range peeks {
		if k := dbKey(h.Key); !asked[string(k)] {
			asked[string(k)] = true
			keys = append(keys, k)
		}
	}
	rows, err := tx.Query(ctx, pgPeekHits, keys)
	if err != nil {
		return fmt.Errorf("postgres: peek counters: %w", err)
	}
	defer rows.Close()
	// A key without a live row is read as the zero state, at the batch's
	// clock, which the last row carries. A live row carries its own: the
	// clock raised to its window's start (see pgRowNowMS), since the
	// statement's snapshot may hold a window another instance opened after
	// this transaction began. Each key is read at its own: a reset's
	// window may start ahead of the clock, and must not move another
	// key's.
	var now time.Time
	type peeked struct {
		s   driver.State
		now time.Time
	}
	found := make(map[string]peeked, len(keys))
	for rows.Next() {
		var key []byte
		var live bool
		var startMS, count, prev, nowMS int64
		if err := rows.Scan(&key, &live, &startMS, &count, &prev, &nowMS); err != nil {
			return fmt.Errorf("postgres: peek counters: %w", err)
		}
		if !live {
			now = time.UnixMilli(nowMS)
			continue
		}
		found[string(key)] = peeked{driver.State{Start: time.UnixMilli(startMS), Count: count, Prev: prev}, time.UnixMilli(nowMS)}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: peek counters: %w", err)
	}
	for _, h := range peeks {
		f, ok := found[string(dbKey(h.Key))]
		if !ok {
			f.now = now
		}
		h.Result = driver.Hit{State: h.Rule.Advance(f.s, f.now), Now: f.now}
	}
	return nil
}

const (
	// pgResetHits locks the rows in key order, as every porch statement
	// does, and starts their open windows over, each under its own
	// length, counting only what leases hold (driver.Lease): their holders
	// may answer those hits without asking, so they stay counted, and
	// held, and a give-back from before the reset still applies to the
	// new window (lease_start is kept). Without held hits the new window
	// is empty. A sliding window keeps its span of two windows while it
	// counts held hits, so that they weigh on the window after. A closed
	// window is left to the next hit, which opens a new one as it does
	// for a key without a row, and a sliding window past its first
	// window's end holds nothing: no lease answers past it.
	//
	// The new window starts at least a millisecond after the one it
	// replaces: a window is told apart by its start alone (see pgTakeBack),
	// and a reset within the millisecond its window opened would otherwise
	// restart it at the same start, so that a late take-back of a hit the
	// reset cleared would come out of a hit served after it. The window
	// then closes up to a millisecond later than one opened now would: the
	// safe side.
	pgResetHits = `UPDATE porch_rate_counters AS c SET
			window_start = r.start, count = r.held, prev = 0, leased = r.held,
			lease_start = CASE WHEN r.held > 0 THEN ` + pgLeaseFrom + ` ELSE r.start END,
			expires_at = r.start + c.window_ms
				* CASE WHEN r.held > 0 AND c.interval_ns = 0 AND c.expires_at - c.window_start > c.window_ms THEN 2 ELSE 1 END
		FROM (
			SELECT key, greatest(` + pgNowMS + `, window_start + 1) AS start,
				CASE WHEN ` + pgNowMS + ` < window_start + window_ms THEN least(leased, count) ELSE 0 END AS held
			FROM porch_rate_counters WHERE key = ANY($1::bytea[]) AND expires_at > ` + pgNowMS + `
			ORDER BY key FOR UPDATE) AS r
		WHERE c.key = r.key`
	// pgPeekHits reads live states only, and then the clock in a row of
	// its own: the rule advances each state to it, as pgAddHits would.
	pgPeekHits = `SELECT key, true, window_start, count, prev, greatest(` + pgNowMS + `, window_start)
		FROM porch_rate_counters WHERE key = ANY($1::bytea[]) AND expires_at > ` + pgNowMS + `
		UNION ALL SELECT ''::bytea, false, 0, 0, 0, ` + pgNowMS
)
