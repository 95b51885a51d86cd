package count

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// engine is a Counter with the pool whose actors it runs on, for the
// white-box tests: what a limiter is to its counter, without HTTP.
type engine struct {
	c    Counter
	pool *actor.Pool
}

// testConfig is the Config of a fixed-window limiter of limit per window
// on pool.
func testConfig(t *testing.T, pool *actor.Pool, limit int64, window time.Duration) Config {
	t.Helper()
	alg, _ := algorithm.At(0)
	r, err := alg.Rule(limit, window, 0)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Pool: pool, Rule: r, Most: r.Most(), Lost: func(error) {}}
}

// newPool is a pool of actors actors that closes when t ends.
func newPool(t *testing.T, actors int) *actor.Pool {
	t.Helper()
	pool := porch.NewPool(porch.PoolOptions{Size: actors})
	t.Cleanup(func() { pool.Close(context.Background()) })
	return actor.Of(pool)
}

// open opens c on pool, as a limiter does once its policy is claimed.
func open(t *testing.T, pool *actor.Pool, c Counter) *engine {
	t.Helper()
	if err := c.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &engine{c: c, pool: pool}
}

// replyTo hands a hit's answer to a waiting test.
type replyTo struct{ r actor.Reply[Verdict] }

func (r replyTo) Reply(v Verdict, _ time.Time, err error) { r.r.Send(v, err) }

// allow counts a hit of weight n to key on its actor and waits for the
// answer, as Limiter.Allow does.
func (e *engine) allow(ctx context.Context, key string, n int64) (Verdict, error) {
	reply := actor.NewReply[Verdict]()
	if err := e.pool.Send(key, func(shard int) { e.c.Hit(shard, key, n, replyTo{reply}) }); err != nil {
		return Verdict{}, err
	}
	return reply.Wait(ctx)
}

// Close closes the counter.
func (e *engine) Close(ctx context.Context) error { return e.c.Close(ctx) }

// localRig is a local counter for the white-box tests: on a SQLite store
// in the test's temporary directory, timed by a fake clock that starts at
// t0, writing ahead as a limiter does by default.
type localRig struct {
	*engine
	st    *sqlite.Store
	clock *stepClock
}

// newLocalRig opens a rig of limit per window counted by actors actors;
// the store and the pool close when t ends, the counter is the test's.
func newLocalRig(t *testing.T, actors int, limit int64, window time.Duration) localRig {
	t.Helper()
	clock := &stepClock{wall: t0}
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{Options: store.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	pool := newPool(t, actors)
	e := open(t, pool, NewLocal(testConfig(t, pool, limit, window), st, "", 256))
	return localRig{engine: e, st: st, clock: clock}
}

// stepClock is the white-box tests' clock.Clock: time moves only by
// Advance.
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
