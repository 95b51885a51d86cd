package postgres

import (
	"context"
	"fmt"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// takeBacks gives back the batch's take-backs in a transaction of their
// own, before its hits are counted, so that a take-back queued before a hit
// is applied before it. Its own transaction keeps a failure from failing the
// batch's hits: a take-back that failed leaves a count high, the safe side,
// and only its own caller hears of it (through Failed).
func (p *Store) takeBacks(ctx context.Context, batch []commit.Op) {
	type window struct {
		key   string // dbKey
		start int64
		lease bool
	}
	type sum struct{ n, settled int64 }
	sums := make(map[window]sum)
	for _, o := range batch {
		if tb := o.TakeBack; tb != nil {
			w := window{string(dbKey(tb.Key)), tb.WindowStart, tb.Lease}
			s := sums[w]
			sums[w] = sum{s.n + tb.N, s.settled + tb.Settled}
		}
	}
	if len(sums) == 0 {
		return
	}
	keys := make([][]byte, 0, len(sums))
	starts := make([]int64, 0, len(sums))
	ns := make([]int64, 0, len(sums))
	leases := make([]bool, 0, len(sums))
	settled := make([]int64, 0, len(sums))
	for w, s := range sums {
		keys, starts, ns = append(keys, []byte(w.key)), append(starts, w.start), append(ns, s.n)
		leases, settled = append(leases, w.lease), append(settled, s.settled)
	}
	err := p.hitsExec(ctx, pgTakeBack, keys, starts, ns, leases, settled)
	if err != nil {
		err = fmt.Errorf("postgres: take back hits: %w", err)
	}
	err = p.late(ctx, "take back hits", err)
	for i := range batch {
		if batch[i].TakeBack != nil {
			batch[i].Settled, batch[i].Failed = true, err
		}
	}
}
