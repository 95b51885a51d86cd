package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// writeBatch counts a batch of hits in one transaction (see countHits),
// on one of the committer's connections. The batch's take-backs and then
// its resets commit first, each in a transaction of their own (see
// takeBacks and resetHits), so a hit queued after either counts after it.
//
// The whole batch has Options.Timeout: past it, the statement running is
// cancelled on the server and the rest fail at once, so the committer is
// free for the next batch, which has a bound of its own, and a batch that
// commits (the standby back) heals the store with no restart.
func (p *Store) writeBatch(batch []commit.Op) error {
	if p.opt.CommitDelay > 0 {
		time.Sleep(p.opt.CommitDelay) // fault injection: a slow database
	}
	ctx, cancel := p.bounded(context.Background())
	defer cancel()
	return p.late(ctx, "commit batch", p.writeBounded(ctx, batch))
}

// writeBounded is writeBatch under ctx, its bound.
func (p *Store) writeBounded(ctx context.Context, batch []commit.Op) error {
	p.takeBacks(ctx, batch)
	var resets []string
	var ops []*commit.Op // what countHits counts: hits, peeks, Health's probe
	for i := range batch {
		o := &batch[i]
		if o.Reset != nil {
			resets = append(resets, o.Reset.Key)
		}
		if o.Hit != nil || o.Peek != nil || o.Probe {
			ops = append(ops, o)
		}
	}
	// A failed reset fails only its callers: the hits then count in the
	// window it did not clear, which is what they would have done before it.
	resetErr := p.resetHits(ctx, resets)
	for i := range batch {
		if batch[i].Reset != nil {
			batch[i].Settled, batch[i].Failed = true, resetErr
		}
	}
	conn, err := p.writer.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: commit batch: %w", err)
	}
	// Released inside a transaction (a statement failed), the connection
	// is closed, which rolls the transaction back.
	defer conn.Release()
	return p.countIsolated(ctx, conn.Conn(), ops)
}

// countIsolated counts ops in one transaction (countHits: two round trips)
// and, if a statement failed for one row's sake (see rowsFault), counts
// them again split in halves by key, recursively, so that only the ops of
// the offending key get the error and every other op of the batch commits.
// The split costs a few transactions per offending key, and only when one
// fails; a batch that commits takes the fast path alone.
//
// It returns nil once every op is settled, committed or failed alone, and
// an error for the whole batch otherwise; ops of a half that committed
// within the bound before such an error are Settled, so their callers hear
// that they committed. A part that committed only after the bound is
// settled as nothing: the whole batch is late (see pastBound).
func (p *Store) countIsolated(ctx context.Context, conn *pgx.Conn, ops []*commit.Op) error {
	b := groupHits(ops)
	if b.fits() {
		rest, err := p.countFitting(ctx, conn, &b)
		switch {
		case err == nil && len(rest) == 0:
			return nil
		case err == nil && ctx.Err() != nil:
			// What fitted committed only after the bound (see pastBound):
			// the whole batch is late, left over or not.
			return pastBound(ctx, "commit fitting hits")
		case err == nil:
			// What fitted has committed: its callers hear so whatever
			// becomes of the keys left over, which count below.
			for _, o := range ops {
				o.Settled = true
			}
			for _, o := range rest {
				o.Settled = false
				if o.Hit != nil {
					o.Hit.Settled, o.Hit.Adopted = 0, 0 // settled with what fitted
				}
			}
			ops = rest
			b = groupHits(ops)
		case !rowsFault(err):
			return err
		default:
			// Rolled back (an autocommit statement has rolled back
			// already: the connection is idle); the general path below
			// counts the batch again and isolates the offending key.
			if conn.PgConn().TxStatus() != 'I' {
				if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
					return errors.Join(err, fmt.Errorf("postgres: roll back failed batch: %w", rerr))
				}
			}
		}
	}
	err := p.countHits(ctx, conn, &b)
	if err == nil || !rowsFault(err) {
		return err
	}
	// The failed statement left the transaction open and aborted.
	if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
		return errors.Join(err, fmt.Errorf("postgres: roll back failed batch: %w", rerr))
	}
	groups := groupByKey(ops)
	if len(groups) <= 1 {
		for _, o := range ops {
			o.Settled, o.Failed = true, err
		}
		return nil
	}
	half := len(groups) / 2
	left, right := slices.Concat(groups[:half]...), slices.Concat(groups[half:]...)
	if err := p.countIsolated(ctx, conn, left); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return pastBound(ctx, "commit a half of a split batch")
	}
	for _, o := range left {
		o.Settled = true // committed, or failed alone with Failed set
	}
	return p.countIsolated(ctx, conn, right)
}

// pastBound is the error of a batch part of which committed after ctx's
// bound: the server answers COMMIT with success when it cancels a wait for
// a synchronous standby (it committed on the primary alone; the WARNING
// saying so is only a notice, which pgx does not return), so a COMMIT that
// comes back once the bound has passed may not be durable as the
// durability level promises, and its hits must not be answered as counted.
// The committer answers every unsettled op of the batch with it (through
// late, which names it errLate).
func pastBound(ctx context.Context, what string) error {
	return fmt.Errorf("postgres: %s: %w", what, ctx.Err())
}

// groupByKey splits ops into one group per key (a hit's and a peek's of
// one key together), in dbKey order; Health's probe, which has no key,
// is a group of its own, first.
func groupByKey(ops []*commit.Op) [][]*commit.Op {
	idx := make(map[string]int)
	var keys []string
	var groups [][]*commit.Op
	for _, o := range ops {
		k := "" // the probe's: it sorts before every "k"-prefixed key
		switch {
		case o.Hit != nil:
			k = "k" + string(dbKey(o.Hit.Key))
		case o.Peek != nil:
			k = "k" + string(dbKey(o.Peek.Key))
		}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			keys = append(keys, k)
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], o)
	}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sorted := make([][]*commit.Op, len(groups))
	for i, j := range order {
		sorted[i] = groups[j]
	}
	return sorted
}

// rowsFault tells an error that one row's data can cause (a data
// exception, SQLSTATE class 22, such as a count out of bigint's range; a
// program limit, class 54, such as an index row too large) from one that
// fails the batch whatever it holds (a lost connection, a deadlock).
// Only the former is worth splitting the batch over.
func rowsFault(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "54":
		return true
	}
	return false
}
