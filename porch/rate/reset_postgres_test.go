package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// On PostgreSQL Peek reads the committed count without counting, and
// Reset clears it in the database: another instance, or a restarted one,
// sees the cleared window.
func TestPeekResetShared(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	a := newInstance(t, dsn, 3, time.Hour)
	for range 5 {
		if v, err := a.lim.Peek(ctx, "hank"); err != nil || !v.Allowed || v.Remaining != 3 {
			t.Fatalf("peek before any hit: got %+v, %v; want 3 remaining", v, err)
		}
	}
	for i := range 3 {
		if v, err := a.lim.Allow(ctx, "hank"); err != nil || !v.Allowed {
			t.Fatalf("Allow %d after peeks: got %+v, %v; want allowed", i+1, v, err)
		}
	}
	b := newInstance(t, dsn, 3, time.Hour)
	if v, err := b.lim.Peek(ctx, "hank"); err != nil || v.Allowed || v.Remaining != 0 {
		t.Fatalf("peek from another instance at the limit: got %+v, %v; want refused, 0 remaining", v, err)
	}
	if err := a.lim.Reset(ctx, "hank"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	a.stop(t)
	if v, err := b.lim.Peek(ctx, "hank"); err != nil || !v.Allowed || v.Remaining != 3 {
		t.Fatalf("peek after the reset: got %+v, %v; want 3 remaining", v, err)
	}
	for i := range 3 {
		if v, err := b.lim.Allow(ctx, "hank"); err != nil || !v.Allowed {
			t.Fatalf("Allow %d after the reset: got %+v, %v; want allowed", i+1, v, err)
		}
	}
	if v, err := b.lim.Allow(ctx, "hank"); err != nil || v.Allowed {
		t.Fatalf("Allow 4 after the reset: got %+v, %v; want refused", v, err)
	}
	if err := b.lim.Reset(ctx, "nobody"); err != nil {
		t.Fatalf("Reset of a principal without a row: %v", err)
	}
}
