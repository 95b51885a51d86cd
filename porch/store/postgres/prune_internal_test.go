package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Without a backlog the prunes ride in one batch per pruneEvery; while
// the last one found a full PruneRows, in every batch; with pruning off,
// in none.
func TestPrunerPaces(t *testing.T) {
	p := newPruner(64)
	t0 := p.epoch
	if !p.claim(t0) {
		t.Fatal("the first write does not prune")
	}
	if p.claim(t0) {
		t.Fatal("two writes at once both prune")
	}
	p.pruned(3)
	if p.claim(t0.Add(pruneEvery - time.Millisecond)) {
		t.Fatal("a write within pruneEvery of a prune that found no backlog prunes")
	}
	if !p.claim(t0.Add(pruneEvery)) {
		t.Fatal("a write pruneEvery after the last prune does not prune")
	}
	p.pruned(64)
	if !p.claim(t0.Add(pruneEvery + time.Microsecond)) {
		t.Fatal("the write after a prune that found a full PruneRows does not prune")
	}
	if off := newPruner(0); off.claim(t0) {
		t.Fatal("pruning off, a write prunes")
	}
}

// A backlog of expired counters is cleared batch after batch, PruneRows
// at a time, however soon the batches follow each other.
func TestBatchesPruneABacklog(t *testing.T) {
	const rows, expired = 10, 45
	p := openInternal(t, pgtest.DSN(t), Options{Options: store.Options{PruneRows: rows}})
	ctx := context.Background()
	if _, err := p.pool.Exec(ctx, `INSERT INTO porch_rate_counters (key, window_start, window_ms, count, expires_at)
		SELECT convert_to('rate:old:' || i, 'UTF8'), 0, 1000, 1, 1000 FROM generate_series(1, $1) AS i`, expired); err != nil {
		t.Fatal(err)
	}
	rule := algorithm.MustRule(algorithm.Fixed, 1000, time.Hour, 0)
	hit := func() {
		t.Helper()
		done := make(chan error, 1)
		if err := p.AddHit("rate:live", rule, 1, driver.Lease{}, func(_ driver.Hit, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for range expired/rows + 1 {
		hit()
	}
	var left int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM porch_rate_counters WHERE expires_at <= 1000`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d expired counters left after %d back-to-back batches pruning %d each", left, expired/rows+1, rows)
	}
}
