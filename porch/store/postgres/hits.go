package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// settle decides kh's hits, in arrival order, from count, the key's count
// after pgAddHits added all of them: a hit is counted if it keeps the
// running total within its limit, and is refused otherwise, so that a
// refused heavy hit leaves room for a lighter one after it, as on SQLite.
// It records in kh.refused the weight to take back out.
func (kh *keyHits) settle(count int64, resetIn time.Duration, windowStart time.Time) {
	at := count - kh.sum // the count before this batch
	kh.refused = 0
	for _, h := range kh.ops {
		if at+h.N <= h.Limit {
			at += h.N
			h.Result = store.Hit{Count: at, ResetIn: resetIn, WindowStart: windowStart}
			continue
		}
		h.Result = store.Hit{Count: at + h.N, ResetIn: resetIn, WindowStart: windowStart}
		kh.refused += h.N
	}
}

// refundHits takes the refused hits' weights back out of the counts, in
// one statement for the batch, run only when some hit was refused.
func refundHits(ctx context.Context, tx pgx.Tx, keys []string, byKey map[string]*keyHits) error {
	var refundKeys []string
	var refunds []int64
	for _, k := range keys {
		if r := byKey[k].refused; r > 0 {
			refundKeys = append(refundKeys, k)
			refunds = append(refunds, r)
		}
	}
	if len(refundKeys) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, pgRefundHits, refundKeys, refunds); err != nil {
		return fmt.Errorf("postgres: refund refused hits: %w", err)
	}
	return nil
}

// takeBacks gives back the batch's take-backs in a transaction of their
// own, before its hits are counted, so that a take-back queued before a hit
// is applied before it. Its own transaction keeps a failure from failing the
// batch's hits: a take-back that failed leaves a count high, the safe side,
// and only its own caller hears of it (through Failed).
func (p *Store) takeBacks(ctx context.Context, batch []commit.Op) {
	type window struct {
		key   string
		start int64
	}
	sums := make(map[window]int64)
	for _, o := range batch {
		if tb := o.TakeBack; tb != nil {
			sums[window{tb.Key, tb.WindowStart}] += tb.N
		}
	}
	if len(sums) == 0 {
		return
	}
	keys := make([]string, 0, len(sums))
	starts := make([]int64, 0, len(sums))
	ns := make([]int64, 0, len(sums))
	for w, n := range sums {
		keys, starts, ns = append(keys, w.key), append(starts, w.start), append(ns, n)
	}
	_, err := p.writer.Exec(ctx, pgTakeBack, keys, starts, ns)
	if err == nil {
		return
	}
	err = fmt.Errorf("postgres: take back hits: %w", err)
	for i := range batch {
		if batch[i].TakeBack != nil {
			batch[i].Failed = err
		}
	}
}
