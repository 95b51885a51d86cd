package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
)

// settle decides kh's hits, in arrival order, from count, the key's count
// after pgAddHits added all of them: a hit is counted if it keeps the
// running total within its limit, and is refused otherwise, so that a
// refused heavy hit leaves room for a lighter one after it, as on SQLite.
// It records in kh.refused the weight to take back out.
func (kh *keyHits) settle(count int64, resetIn time.Duration) {
	at := count - kh.sum // the count before this batch
	kh.refused = 0
	for _, h := range kh.ops {
		if at+h.N <= h.Limit {
			at += h.N
			h.Result = store.Hit{Count: at, ResetIn: resetIn}
			continue
		}
		h.Result = store.Hit{Count: at + h.N, ResetIn: resetIn}
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
