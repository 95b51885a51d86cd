package rate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// peek reads principal's state and fails the test on error.
func (r *rig) peek(t *testing.T, principal string) rate.Verdict {
	t.Helper()
	v, err := r.lim.Peek(context.Background(), principal)
	if err != nil {
		t.Fatalf("peek %q: %v", principal, err)
	}
	return v
}

// Peeking uses up nothing: after many peeks the whole limit is still there.
func TestPeekDoesNotCount(t *testing.T) {
	r := newRig(t, 3, time.Minute, rigOptions{})
	for i := range 10 {
		if v := r.peek(t, "alice"); !v.Allowed || v.Remaining != 3 || v.Limit != 3 {
			t.Fatalf("peek %d: got %+v, want allowed with 3 of 3 remaining", i+1, v)
		}
	}
	for i := range 3 {
		if !r.allow(t, "alice").Allowed {
			t.Fatalf("Allow %d refused after peeks: peeking counted", i+1)
		}
	}
	if r.allow(t, "alice").Allowed {
		t.Fatal("Allow 4 of a limit of 3 allowed")
	}
}

// Peek reports what the hits so far left, and the window Allow reports.
func TestPeekReflectsHits(t *testing.T) {
	r := newRig(t, 3, time.Minute, rigOptions{})
	if v := r.peek(t, "bob"); v.ResetAt != t0.Add(time.Minute) {
		t.Errorf("peek before any hit: got ResetAt %v, want %v (a window opened now)", v.ResetAt, t0.Add(time.Minute))
	}
	first := r.allow(t, "bob")
	r.clock.Advance(10 * time.Second)
	r.allow(t, "bob")
	v := r.peek(t, "bob")
	if !v.Allowed || v.Remaining != 1 {
		t.Fatalf("after 2 of 3: got %+v, want allowed with 1 remaining", v)
	}
	if !v.ResetAt.Equal(first.ResetAt) {
		t.Errorf("got ResetAt %v, want the window's %v", v.ResetAt, first.ResetAt)
	}
	r.allow(t, "bob")
	if v := r.peek(t, "bob"); v.Allowed || v.Remaining != 0 {
		t.Fatalf("at the limit: got %+v, want refused with 0 remaining", v)
	}
	if v := r.peek(t, "carol"); !v.Allowed || v.Remaining != 3 {
		t.Fatalf("another principal: got %+v, want its own full limit", v)
	}
	r.clock.Advance(time.Minute)
	if v := r.peek(t, "bob"); !v.Allowed || v.Remaining != 3 {
		t.Fatalf("after the window closed: got %+v, want the full limit", v)
	}
}

// Peek and Reset refuse an empty principal, as Allow does.
func TestPeekResetNoPrincipal(t *testing.T) {
	r := newRig(t, 3, time.Minute, rigOptions{})
	if _, err := r.lim.Peek(context.Background(), ""); !errors.Is(err, rate.ErrNoPrincipal) {
		t.Errorf("Peek(\"\"): got %v, want ErrNoPrincipal", err)
	}
	if err := r.lim.Reset(context.Background(), ""); !errors.Is(err, rate.ErrNoPrincipal) {
		t.Errorf("Reset(\"\"): got %v, want ErrNoPrincipal", err)
	}
}
