package rate

import (
	"context"
	"testing"
	"time"
)

// A take-back that reaches the actor after a reset must not come out of
// the reset window's hits, even when the store's clock has not moved since
// the window the hit was counted in opened (a fake or coarse clock): the
// reset window must not share the old window's start, which is all a
// take-back is matched on.
func TestTakeBackAfterResetAtTheSameInstant(t *testing.T) {
	rg := newInternalRig(t, 1, 2, time.Minute)
	l := rg.l
	ctx := context.Background()
	key := l.principalKey("ann")
	c, err := l.post(key, 1) // a set's hit, to be given back
	if err != nil {
		t.Fatal(err)
	}
	v, start, err := l.await(ctx, c)
	if err != nil || !v.Allowed {
		t.Fatalf("first hit: got %+v, %v; want allowed", v, err)
	}
	if err := l.Reset(ctx, "ann"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if v, err := l.Allow(ctx, "ann"); err != nil || !v.Allowed || v.Remaining != 1 {
		t.Fatalf("hit after the reset: got %+v, %v; want allowed with 1 left", v, err)
	}
	l.takeBack(key, start, 1) // late: the reset cleared that hit already
	if v, err := l.Peek(ctx, "ann"); err != nil || v.Remaining != 1 {
		t.Fatalf("after a late take-back: got %+v, %v; want 1 left (the hit served after the reset still counted)", v, err)
	}
}
