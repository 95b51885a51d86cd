package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// Harness is how the suite reaches a driver: where a fresh database is,
// and how to open a store on one. A database outlives the stores opened on
// it, so that the suite can close a store and open another on the same
// database (a restart), or, for a shared store, open two at once (two
// instances).
type Harness struct {
	// DB returns a fresh, empty database for one test, in whatever form
	// Open takes (a file path, a DSN, a key prefix), and removes it when t
	// ends.
	DB func(t *testing.T) string
	// Open opens a store on db, failing t if it cannot. The suite closes
	// it. It is called again on a db whose store has closed, and, when the
	// store is a store.SharedCounters, on a db another store has open.
	Open func(t *testing.T, db string) store.Counters
}

// Algorithms are the algorithms the suite runs, every one for every
// driver: a driver that lacks one fails its subtest.
var Algorithms = []rate.Algorithm{rate.FixedWindow, rate.SlidingWindow, rate.GCRA}

// callTimeout bounds each call the suite makes of a limiter or a store, so
// that a driver that never answers fails the test instead of hanging it.
const callTimeout = 20 * time.Second

// TestCounters runs the conformance suite over h's stores: a subtest per
// algorithm, each with a subtest per property (see the package doc).
func TestCounters(t *testing.T, h Harness) {
	if h.DB == nil || h.Open == nil {
		t.Fatal("storetest: Harness needs DB and Open")
	}
	t.Run("Kind", func(t *testing.T) { testKind(t, h) })
	for _, alg := range Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			// One probe first: a driver without the algorithm fails here
			// once, clearly, rather than in every subtest.
			n := h.node(t)
			if _, err := n.newLimiter(policy{alg: alg, limit: 1, window: time.Hour}, "probe"); err != nil {
				if errors.Is(err, store.ErrAlgorithm) {
					t.Fatalf("the driver does not implement %s: rate.New: %v", alg, err)
				}
				t.Fatalf("rate.New: %v", err)
			}
			n.stop(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, h, alg) })
			}
		})
	}
}

// testKind checks that the store offers exactly one way of counting.
func testKind(t *testing.T, h Harness) {
	st := h.node(t).st
	_, excl := st.(store.ExclusiveCounters)
	_, shared := st.(store.SharedCounters)
	if excl == shared {
		t.Fatalf("%T: implements store.ExclusiveCounters %v and store.SharedCounters %v; want exactly one", st, excl, shared)
	}
}

// node is one process's side of a database: a store, a pool of actors,
// and the limiters built on them.
type node struct {
	db      string
	st      store.Counters
	pool    *porch.Pool
	lims    []*rate.Limiter
	stopped bool
}

// node opens a store on a fresh database.
func (h Harness) node(t *testing.T) *node { return h.nodeOn(t, h.DB(t)) }

// nodeOn opens a store on db and starts a pool; both close at t's end
// unless stop has closed them.
func (h Harness) nodeOn(t *testing.T, db string) *node {
	t.Helper()
	st := h.Open(t, db)
	if st == nil {
		t.Fatal("storetest: Harness.Open returned a nil store")
	}
	n := &node{db: db, st: st, pool: porch.NewPool(porch.PoolOptions{})}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// policy is a limiter's policy under test.
type policy struct {
	alg    rate.Algorithm
	limit  int
	window time.Duration
	burst  int // GCRA only; 0 is the limit
}

func (p policy) String() string {
	return fmt.Sprintf("%s %d per %s, burst %d", p.alg, p.limit, p.window, p.burst)
}

// most is the heaviest request p can ever allow.
func (p policy) most() int {
	if p.burst > 0 {
		return p.burst
	}
	return p.limit
}

// newLimiter builds a limiter of p named name on n, returning rate.New's
// error; n closes it.
func (n *node) newLimiter(p policy, name string) (*rate.Limiter, error) {
	return n.newLimiterWith(p, rate.Options{Name: name})
}

// newLimiterWith is newLimiter with more options; p sets Algorithm and
// Burst.
func (n *node) newLimiterWith(p policy, opt rate.Options) (*rate.Limiter, error) {
	opt.Algorithm, opt.Burst = p.alg, p.burst
	l, err := rate.New(n.pool, n.st, p.limit, p.window, opt)
	if err != nil {
		return nil, err
	}
	n.lims = append(n.lims, l)
	return l, nil
}

// limiter is newLimiter that fails t on error.
func (n *node) limiter(t *testing.T, p policy, name string) *rate.Limiter {
	t.Helper()
	l, err := n.newLimiter(p, name)
	if err != nil {
		t.Fatalf("rate.New(%s, %q): %v", p, name, err)
	}
	return l
}

// closeLimiter closes l before n stops, failing t on error.
func (n *node) closeLimiter(t *testing.T, l *rate.Limiter) {
	t.Helper()
	for i, m := range n.lims {
		if m == l {
			n.lims = append(n.lims[:i], n.lims[i+1:]...)
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("close limiter: %v", err)
	}
}

// stop shuts n down cleanly, as porch.App does: limiters (which leave
// exact counts behind), then the pool, then the store. It is safe to call
// twice.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.stopped {
		return
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, l := range n.lims {
		if err := l.Close(ctx); err != nil {
			t.Errorf("close limiter: %v", err)
		}
	}
	if err := n.pool.Close(ctx); err != nil {
		t.Errorf("close pool: %v", err)
	}
	if err := n.st.Close(ctx); err != nil {
		t.Errorf("close store: %v", err)
	}
}

// allowN counts a request of weight w for principal, failing t on error.
func allowN(t *testing.T, l *rate.Limiter, principal string, w int) rate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := l.AllowN(ctx, principal, w)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", principal, w, err)
	}
	return v
}

func allow(t *testing.T, l *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	return allowN(t, l, principal, 1)
}

func peek(t *testing.T, l *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := l.Peek(ctx, principal)
	if err != nil {
		t.Fatalf("Peek(%q): %v", principal, err)
	}
	return v
}

func reset(t *testing.T, l *rate.Limiter, principal string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := l.Reset(ctx, principal); err != nil {
		t.Fatalf("Reset(%q): %v", principal, err)
	}
}

// allowed counts want requests of principal, each of which must be
// allowed.
func allowAll(t *testing.T, l *rate.Limiter, principal string, want int) {
	t.Helper()
	for i := range want {
		if v := allow(t, l, principal); !v.Allowed {
			t.Fatalf("request %d of %d: refused (%+v), want allowed", i+1, want, v)
		}
	}
}

// refused counts one request of principal, which must be refused.
func refused(t *testing.T, l *rate.Limiter, principal, why string) rate.Verdict {
	t.Helper()
	v := allow(t, l, principal)
	if v.Allowed {
		t.Fatalf("%s: allowed (%+v), want refused", why, v)
	}
	if v.RetryAt.IsZero() {
		t.Errorf("%s: refusal without RetryAt", why)
	}
	return v
}

// sleepUntil waits for the wall clock to reach at: time a window must
// take to pass, not synchronisation.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }
