package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
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
	// store is a driver.SharedCounters, on a db another store has open.
	Open func(t *testing.T, db string) driver.Counters
	// Forgets says the store keeps nothing once closed (an in-memory
	// store): the cases that close a store and open another on its
	// database skip, rather than pass through a back door.
	Forgets bool
	// Algorithms, if set, names the algorithms to run ("fixed",
	// "sliding", "gcra"); if empty, every one.
	Algorithms []string
}

// reopens skips t when h's store keeps nothing across a close.
func (h Harness) reopens(t *testing.T) {
	t.Helper()
	if h.Forgets {
		t.Skip("the store keeps nothing once closed (Harness.Forgets)")
	}
}

// callTimeout bounds each call the suite makes of a store, so that a
// driver that never answers fails the test instead of hanging it.
const callTimeout = 20 * time.Second

// TestCounters runs the conformance suite over h's stores for every
// algorithm porch counts with (or those h.Algorithms names): a subtest per
// algorithm, each with a subtest per property (see the package doc). A
// shared store that has no statements for an algorithm (its ClaimPolicy or
// AddHit fails with driver.ErrAlgorithm) skips it.
func TestCounters(t *testing.T, h Harness) {
	if h.DB == nil || h.Open == nil {
		t.Fatal("storetest: Harness needs DB and Open")
	}
	var algs []algorithm.Algorithm
	for _, alg := range algorithm.All() {
		if len(h.Algorithms) == 0 || slices.Contains(h.Algorithms, alg.Name()) {
			algs = append(algs, alg)
		}
	}
	if len(algs) == 0 {
		t.Fatalf("storetest: no algorithm is named %q", h.Algorithms)
	}
	t.Run("Kind", func(t *testing.T) { testKind(t, h) })
	for _, alg := range algs {
		t.Run(alg.Name(), func(t *testing.T) {
			n := h.node(t)
			cases := exclusiveCases
			if _, ok := n.st.(driver.SharedCounters); ok {
				cases = sharedCases
				if err := probe(n, alg); errors.Is(err, driver.ErrAlgorithm) {
					t.Skipf("the driver has no statements for %s: %v", alg.Name(), err)
				} else if err != nil {
					t.Fatalf("probe %s: %v", alg.Name(), err)
				}
			}
			n.stop(t)
			for _, c := range append(cases, commonCases...) {
				t.Run(c.name, func(t *testing.T) { c.run(t, h, alg) })
			}
		})
	}
}

// probe asks a shared store to claim and count one hit under alg.
func probe(n *node, alg algorithm.Algorithm) error {
	r := ruleOf(alg, 1, time.Hour, 0)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	release, err := n.st.ClaimPolicy(ctx, policyOf("probe", r))
	if err != nil {
		return err
	}
	defer release()
	_, err = n.addHit("probe", r, 1)
	return err
}

// testKind checks that the store offers exactly one way of counting.
func testKind(t *testing.T, h Harness) {
	st := h.node(t).st
	_, excl := st.(driver.ExclusiveCounters)
	_, shared := st.(driver.SharedCounters)
	if excl == shared {
		t.Fatalf("%T: implements driver.ExclusiveCounters %v and driver.SharedCounters %v; want exactly one", st, excl, shared)
	}
}

// ruleOf is alg's rule of limit per window with burst; it panics on a
// policy alg refuses, which is the suite's mistake.
func ruleOf(alg algorithm.Algorithm, limit int64, window time.Duration, burst int64) algorithm.Rule {
	return algorithm.MustRule(alg, limit, window, burst)
}

// policyOf is the policy a limiter named name records for r.
func policyOf(name string, r algorithm.Rule) driver.Policy {
	return driver.Policy{Name: name, Limit: r.Limit(), Window: r.Window(), Algorithm: r.Algorithm(), Burst: r.Burst()}
}

// node is one process's side of a database: a store and the claims made
// in it.
type node struct {
	db      string
	st      driver.Counters
	stopped bool
}

// node opens a store on a fresh database.
func (h Harness) node(t *testing.T) *node { return h.nodeOn(t, h.DB(t)) }

// nodeOn opens a store on db; it closes at t's end unless stop has closed
// it.
func (h Harness) nodeOn(t *testing.T, db string) *node {
	t.Helper()
	st := h.Open(t, db)
	if st == nil {
		t.Fatal("storetest: Harness.Open returned a nil store")
	}
	n := &node{db: db, st: st}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop closes n's store, which writes what it has queued. It is safe to
// call twice.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.stopped {
		return
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := n.st.Close(ctx); err != nil {
		t.Errorf("close store: %v", err)
	}
}

func (n *node) shared(t *testing.T) driver.SharedCounters {
	t.Helper()
	s, ok := n.st.(driver.SharedCounters)
	if !ok {
		t.Fatalf("%T is not a driver.SharedCounters", n.st)
	}
	return s
}

func (n *node) exclusive(t *testing.T) driver.ExclusiveCounters {
	t.Helper()
	s, ok := n.st.(driver.ExclusiveCounters)
	if !ok {
		t.Fatalf("%T is not a driver.ExclusiveCounters", n.st)
	}
	return s
}

// claim claims p in n's store, failing t on error; the claim is released
// when the test ends.
func (n *node) claim(t *testing.T, p driver.Policy) func() {
	t.Helper()
	release, err := n.tryClaim(p)
	if err != nil {
		t.Fatalf("ClaimPolicy(%s): %v", p, err)
	}
	t.Cleanup(release)
	return release
}

func (n *node) tryClaim(p driver.Policy) (func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return n.st.ClaimPolicy(ctx, p)
}

// wait runs one asynchronous call of a store, which calls done, and waits
// for done under callTimeout.
func wait[T any](call func(done func(T, error)) error) (T, error) {
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	var zero T
	if err := call(func(v T, err error) { ch <- answer{v, err} }); err != nil {
		return zero, err
	}
	select {
	case a := <-ch:
		return a.v, a.err
	case <-time.After(callTimeout):
		return zero, fmt.Errorf("storetest: no answer within %s", callTimeout)
	}
}

// wait0 is wait for a call whose done carries only an error.
func wait0(call func(done func(error)) error) error {
	_, err := wait(func(done func(struct{}, error)) error {
		return call(func(err error) { done(struct{}{}, err) })
	})
	return err
}

func (n *node) addHit(key string, r driver.Rule, w int64) (driver.Hit, error) {
	s := n.st.(driver.SharedCounters)
	return wait(func(done func(driver.Hit, error)) error { return s.AddHit(key, r, w, driver.Lease{}, done) })
}

// hit is addHit that fails t on error.
func (n *node) hit(t *testing.T, key string, r driver.Rule, w int64) driver.Hit {
	t.Helper()
	h, err := n.addHit(key, r, w)
	if err != nil {
		t.Fatalf("AddHit(%q, %d): %v", key, w, err)
	}
	return h
}

func (n *node) peek(t *testing.T, key string, r driver.Rule) driver.Hit {
	t.Helper()
	s := n.shared(t)
	h, err := wait(func(done func(driver.Hit, error)) error { return s.PeekHit(key, r, done) })
	if err != nil {
		t.Fatalf("PeekHit(%q): %v", key, err)
	}
	return h
}

// room is what key admits now, by the store's own reading of it.
func (n *node) room(t *testing.T, key string, r driver.Rule) int64 {
	t.Helper()
	h := n.peek(t, key, r)
	return r.Room(h.State, h.Now)
}

// untilStarted waits until the store's clock has reached the start of
// key's epoch. A reset may start its epoch up to a millisecond ahead of
// the store's clock, so that it never starts where the old epoch did (a
// late take-back then never comes out of it); until then a GCRA bucket
// holds that millisecond back.
func (n *node) untilStarted(t *testing.T, key string, r driver.Rule) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		h := n.peek(t, key, r)
		if !h.Now.Before(h.State.Start) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock stays at %v, before %s's epoch start %v", h.Now, key, h.State.Start)
		}
	}
}

func (n *node) reset(t *testing.T, key string) {
	t.Helper()
	s := n.shared(t)
	if err := wait0(func(done func(error)) error { return s.ResetHit(key, done) }); err != nil {
		t.Fatalf("ResetHit(%q): %v", key, err)
	}
}

func (n *node) takeBack(t *testing.T, key string, start time.Time, w int64) {
	t.Helper()
	s := n.shared(t)
	if err := wait0(func(done func(error)) error { return s.TakeBack(key, start, w, done) }); err != nil {
		t.Fatalf("TakeBack(%q, %d): %v", key, w, err)
	}
}

// hitAll has clients goroutines, released together, each count one hit of
// weight(i) for key on nodes[i%len(nodes)]; it returns the sum of the
// weights allowed. An error fails t.
func hitAll(t *testing.T, nodes []*node, key string, r driver.Rule, clients int, weight func(i int) int64) int64 {
	t.Helper()
	var (
		mu    sync.Mutex
		sum   int64
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range clients {
		n, w := nodes[i%len(nodes)], weight(i)
		wg.Go(func() {
			<-start
			h, err := n.addHit(key, r, w)
			if err != nil {
				t.Errorf("AddHit(%q, %d): %v", key, w, err)
				return
			}
			if h.Allowed {
				mu.Lock()
				sum += w
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return sum
}

func one(int) int64 { return 1 }

// load reads the counters of n's exclusive store still open at now, by
// key; a key read twice fails t.
func (n *node) load(t *testing.T, now time.Time) map[string]driver.Counter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rows := map[string]driver.Counter{}
	err := n.exclusive(t).LoadCounters(ctx, now, func(c driver.Counter) {
		if _, dup := rows[c.Key]; dup {
			t.Errorf("LoadCounters read key %q twice", c.Key)
		}
		rows[c.Key] = c
	})
	if err != nil {
		t.Fatalf("LoadCounters: %v", err)
	}
	return rows
}

// save writes c through n's exclusive store and waits for its commit.
func (n *node) save(t *testing.T, c driver.Counter) {
	t.Helper()
	s := n.exclusive(t)
	if err := wait0(func(done func(error)) error { return s.SaveCounter(c, done) }); err != nil {
		t.Fatalf("SaveCounter(%+v): %v", c, err)
	}
}

// sleepUntil waits for the wall clock to reach at: time a window must
// take to pass, not synchronisation.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }
