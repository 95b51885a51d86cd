package rate

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// internalRig is a limiter for the white-box tests: on a SQLite store in the
// test's temporary directory, timed by a fake clock that starts at t0.
type internalRig struct {
	l     *Limiter
	st    *sqlite.Store
	pool  *porch.Pool
	clock *porchtest.FakeClock
}

// newInternalRig opens a rig of limit per window counted by actors actors;
// the store and the pool close when t ends, the limiter is the test's.
func newInternalRig(t *testing.T, actors, limit int, window time.Duration) internalRig {
	t.Helper()
	clock := porchtest.NewFakeClock(t0)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), store.Options{Clock: clock})
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
