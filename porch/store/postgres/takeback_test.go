package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// takeBack gives back n hits and waits for the commit.
func takeBack(t *testing.T, s *postgres.Store, key string, start time.Time, n int64) {
	t.Helper()
	done := make(chan error, 1)
	if err := s.TakeBack(key, start, n, func(err error) { done <- err }); err != nil {
		t.Fatalf("TakeBack: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("TakeBack done: %v", err)
	}
}

// A take-back lowers the count of the window the hit was counted in, never
// below zero, and leaves any other window alone: a late take-back must not
// come out of a newer window's hits.
func TestPostgresTakeBack(t *testing.T) {
	s := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	const key = "rate:t:p:alice"
	h := addHit(t, s, key, time.Hour)
	addHit(t, s, key, time.Hour)
	if h.WindowStart.IsZero() {
		t.Fatal("got a zero Hit.WindowStart, want the window's start")
	}
	takeBack(t, s, key, h.WindowStart, 1)
	if got := addHit(t, s, key, time.Hour).Count; got != 2 {
		t.Errorf("after taking one of two back: got count %d on the next hit, want 2", got)
	}
	takeBack(t, s, key, h.WindowStart.Add(-time.Hour), 2) // an older window
	if got := addHit(t, s, key, time.Hour).Count; got != 3 {
		t.Errorf("after a take-back from another window: got count %d, want 3", got)
	}
	takeBack(t, s, key, h.WindowStart, 10)
	var stored int64
	if err := s.Pool().QueryRow(context.Background(), `SELECT count FROM porch_rate_counters WHERE key = $1`, key).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 0 {
		t.Errorf("after taking back more than was counted: got stored count %d, want 0", stored)
	}
}

// resetHit clears key's window and waits for the commit.
func resetHit(t *testing.T, s *postgres.Store, key string) {
	t.Helper()
	done := make(chan error, 1)
	if err := s.ResetHit(key, func(err error) { done <- err }); err != nil {
		t.Fatalf("ResetHit: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ResetHit done: %v", err)
	}
}

// A take-back that arrives after a reset must not come out of the reset
// window's hits, even when the reset ran within the same millisecond as the
// hit it gives back: window starts are milliseconds, so a reset that
// restarted the window at the old start would let the late take-back
// erase a hit that was served, and the key could go one over its limit.
func TestPostgresTakeBackAfterResetInTheSameMillisecond(t *testing.T) {
	s := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	prefix := fmt.Sprintf("rate:t:reset-%d:", time.Now().UnixNano())
	for i := range 500 {
		key := prefix + strconv.Itoa(i)
		h1 := addHit(t, s, key, time.Hour) // a set's hit, to be given back
		resetHit(t, s, key)
		h2 := addHit(t, s, key, time.Hour) // served after the reset
		if h2.Count != 1 {
			t.Fatalf("try %d: got count %d after the reset, want 1", i, h2.Count)
		}
		if h2.WindowStart.Equal(h1.WindowStart) {
			t.Errorf("try %d: the reset window starts where the window it replaced did (%v): a late take-back cannot tell them apart", i, h1.WindowStart)
		}
		takeBack(t, s, key, h1.WindowStart, 1)
		var stored int64
		if err := s.Pool().QueryRow(context.Background(), `SELECT count FROM porch_rate_counters WHERE key = $1`, key).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != 1 {
			t.Fatalf("try %d: a take-back for a hit the reset cleared took away a hit served after it: got count %d, want 1", i, stored)
		}
	}
}
