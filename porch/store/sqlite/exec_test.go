package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// An application's write joins group commit: it is durable when Exec
// returns, and its own failure is its caller's alone — the counter written
// in the same batch still commits.
func TestExecJoinsGroupCommit(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	if _, err := s.DB().Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "a"); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("orders after Exec: %d rows, err %v; want 1", n, err)
	}

	// A duplicate key fails alone, in a batch with a counter write.
	counter := make(chan error, 1)
	dup := make(chan error, 1)
	c := driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
	go func() { dup <- s.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "a") }()
	if err := s.SaveCounter(c, func(err error) { counter <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-dup; err == nil {
		t.Fatal("duplicate insert through Exec: got nil, want its constraint error")
	}
	if err := <-counter; err != nil {
		t.Fatalf("counter written beside a failed Exec: %v, want it committed", err)
	}
	if err := s.DB().QueryRow(`SELECT count(*) FROM porch_rate_current`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("counters: %d rows, err %v; want 1", n, err)
	}
}
