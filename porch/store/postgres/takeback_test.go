package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
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
	s := openPostgres(t, pgtest.DSN(t))
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
