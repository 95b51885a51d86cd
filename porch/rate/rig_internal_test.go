package rate

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// internalRig is a limiter for the white-box tests: on a SQLite store in the
// test's temporary directory, timed by a fake clock that starts at t0.
type internalRig struct {
	l     *Limiter
	st    *sqlite.Store
	pool  *porch.Pool
	clock *stepClock
}

// newInternalRig opens a rig of limit per window counted by actors actors;
// the store and the pool close when t ends, the limiter is the test's.
func newInternalRig(t *testing.T, actors, limit int, window time.Duration) internalRig {
	t.Helper()
	clock := &stepClock{wall: t0}
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{Options: store.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{Size: actors})
	t.Cleanup(func() { pool.Close(context.Background()) })
	l, err := New(pool, st, limit, window, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return internalRig{l: l, st: st, pool: pool, clock: clock}
}

// stepClock is the white-box tests' clock.Clock: time moves only by
// Advance.
// These tests are package rate, and porchtest, whose FakeClock the others
// use, imports rate (its Observer is a rate.Observer): importing it here
// would be a cycle.
type stepClock struct {
	mu   sync.Mutex // protects the fields below
	wall time.Time
	mono time.Duration
}

func (c *stepClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *stepClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass on both clocks.
func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
}
