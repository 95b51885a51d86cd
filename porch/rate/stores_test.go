package rate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
)

// What a limiter promises, checked over every store it counts in (the
// drivers' own suite, porch/store/storetest, checks their counters
// without a limiter): exact counts under parallel requests, plain and
// weighted; each algorithm at a window's edge on the store's clock;
// Reset, Peek and a Set's take-back; the middleware's 413 for a request
// heavier than the limit; policy conflicts; counts that survive a clean
// close and reopen; and, on a shared store, an exact limit across two
// instances on one database. Windows are short (a second at most), so
// each store takes a few seconds per algorithm.
func TestLimiterOnStores(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		testLimiterOnStores(t, storeHarness{
			DB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "porch.db") },
			Open: func(t *testing.T, db string) driver.Counters {
				st, err := sqlite.Open(db, sqlite.Options{})
				if err != nil {
					t.Fatalf("sqlite.Open: %v", err)
				}
				return st
			},
		})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		testLimiterOnStores(t, storeHarness{
			DB: func(t *testing.T) string { return pgtest.DSN(t) },
			Open: func(t *testing.T, dsn string) driver.Counters {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				st, err := postgres.Open(ctx, dsn, postgres.Options{})
				if err != nil {
					t.Fatalf("postgres.Open: %v", err)
				}
				return st
			},
		})
	})
	t.Run("Redis", func(t *testing.T) {
		c := redistest.Client(t)
		testLimiterOnStores(t, storeHarness{
			DB: func(t *testing.T) string { return redistest.Prefix(t, c) },
			Open: func(t *testing.T, prefix string) driver.Counters {
				st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
				if err != nil {
					t.Fatalf("redis.Open: %v", err)
				}
				return st
			},
		})
	})
}

// storeHarness is how the suite reaches a driver: where a fresh database is,
// and how to open a store on one. A database outlives the stores opened on
// it, so that the suite can close a store and open another on the same
// database (a restart), or, for a shared store, open two at once (two
// instances).
type storeHarness struct {
	// DB returns a fresh, empty database for one test, in whatever form
	// Open takes (a file path, a DSN, a key prefix), and removes it when t
	// ends.
	DB func(t *testing.T) string
	// Open opens a store on db, failing t if it cannot. The suite closes
	// it. It is called again on a db whose store has closed, and, when the
	// store is a driver.SharedCounters, on a db another store has open.
	Open func(t *testing.T, db string) driver.Counters
}

// storeAlgorithms are the algorithms the suite runs, every one for every
// driver: a driver that lacks one fails its subtest.
var storeAlgorithms = []rate.Algorithm{rate.FixedWindow, rate.SlidingWindow, rate.GCRA}

// storeCallTimeout bounds each call the suite makes of a limiter or a store, so
// that a driver that never answers fails the test instead of hanging it.
const storeCallTimeout = 20 * time.Second

// testLimiterOnStores runs real limiters over h's stores: a subtest per
// algorithm, each with a subtest per property (see TestLimiterOnStores).
func testLimiterOnStores(t *testing.T, h storeHarness) {
	if h.DB == nil || h.Open == nil {
		t.Fatal("storeHarness needs DB and Open")
	}
	t.Run("Kind", func(t *testing.T) { testStoreKind(t, h) })
	for _, alg := range storeAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			// One probe first: a driver without the algorithm fails here
			// once, clearly, rather than in every subtest.
			n := h.storeNode(t)
			if _, err := n.newLimiter(storePolicy{alg: alg, limit: 1, window: time.Hour}, "probe"); err != nil {
				if errors.Is(err, driver.ErrAlgorithm) {
					t.Fatalf("the driver does not implement %s: rate.New: %v", alg, err)
				}
				t.Fatalf("rate.New: %v", err)
			}
			n.stop(t)
			for _, c := range storeCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, h, alg) })
			}
		})
	}
}

// testKind checks that the store offers exactly one way of counting.
func testStoreKind(t *testing.T, h storeHarness) {
	st := h.storeNode(t).st
	_, excl := st.(driver.ExclusiveCounters)
	_, shared := st.(driver.SharedCounters)
	if excl == shared {
		t.Fatalf("%T: implements driver.ExclusiveCounters %v and driver.SharedCounters %v; want exactly one", st, excl, shared)
	}
}

// node is one process's side of a database: a store, a pool of actors,
// and the limiters built on them.
type storeNode struct {
	db      string
	st      driver.Counters
	pool    *porch.Pool
	lims    []*rate.Limiter
	stopped bool
}

// node opens a store on a fresh database.
func (h storeHarness) storeNode(t *testing.T) *storeNode { return h.nodeOn(t, h.DB(t)) }

// nodeOn opens a store on db and starts a pool; both close at t's end
// unless stop has closed them.
func (h storeHarness) nodeOn(t *testing.T, db string) *storeNode {
	t.Helper()
	st := h.Open(t, db)
	if st == nil {
		t.Fatal("storeHarness.Open returned a nil store")
	}
	n := &storeNode{db: db, st: st, pool: porch.NewPool(porch.PoolOptions{})}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// policy is a limiter's policy under test.
type storePolicy struct {
	alg    rate.Algorithm
	limit  int
	window time.Duration
	burst  int // GCRA only; 0 is the limit
}

func (p storePolicy) String() string {
	return fmt.Sprintf("%s %d per %s, burst %d", p.alg, p.limit, p.window, p.burst)
}

// most is the heaviest request p can ever allow.
func (p storePolicy) most() int {
	if p.burst > 0 {
		return p.burst
	}
	return p.limit
}

// newLimiter builds a limiter of p named name on n, returning rate.New's
// error; n closes it.
func (n *storeNode) newLimiter(p storePolicy, name string) (*rate.Limiter, error) {
	return n.newLimiterWith(p, rate.Options{Name: name})
}

// newLimiterWith is newLimiter with more options; p sets Algorithm and
// Burst.
func (n *storeNode) newLimiterWith(p storePolicy, opt rate.Options) (*rate.Limiter, error) {
	opt.Algorithm, opt.Burst = p.alg, p.burst
	l, err := rate.New(n.pool, n.st, p.limit, p.window, opt)
	if err != nil {
		return nil, err
	}
	n.lims = append(n.lims, l)
	return l, nil
}

// limiter is newLimiter that fails t on error.
func (n *storeNode) limiter(t *testing.T, p storePolicy, name string) *rate.Limiter {
	t.Helper()
	l, err := n.newLimiter(p, name)
	if err != nil {
		t.Fatalf("rate.New(%s, %q): %v", p, name, err)
	}
	return l
}

// closeLimiter closes l before n stops, failing t on error.
func (n *storeNode) closeLimiter(t *testing.T, l *rate.Limiter) {
	t.Helper()
	for i, m := range n.lims {
		if m == l {
			n.lims = append(n.lims[:i], n.lims[i+1:]...)
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("close limiter: %v", err)
	}
}

// stop shuts n down cleanly, as porch.App does: limiters (which leave
// exact counts behind), then the pool, then the store. It is safe to call
// twice.
func (n *storeNode) stop(t *testing.T) {
	t.Helper()
	if n.stopped {
		return
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
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
func stAllowN(t *testing.T, l *rate.Limiter, principal string, w int) rate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	v, err := l.AllowN(ctx, principal, w)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", principal, w, err)
	}
	return v
}

func stAllow(t *testing.T, l *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	return stAllowN(t, l, principal, 1)
}

func stPeek(t *testing.T, l *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	v, err := l.Peek(ctx, principal)
	if err != nil {
		t.Fatalf("Peek(%q): %v", principal, err)
	}
	return v
}

func stReset(t *testing.T, l *rate.Limiter, principal string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	if err := l.Reset(ctx, principal); err != nil {
		t.Fatalf("Reset(%q): %v", principal, err)
	}
}

// allowed counts want requests of principal, each of which must be
// allowed.
func stAllowAll(t *testing.T, l *rate.Limiter, principal string, want int) {
	t.Helper()
	for i := range want {
		if v := stAllow(t, l, principal); !v.Allowed {
			t.Fatalf("request %d of %d: refused (%+v), want allowed", i+1, want, v)
		}
	}
}

// refused counts one request of principal, which must be refused.
func stRefused(t *testing.T, l *rate.Limiter, principal, why string) rate.Verdict {
	t.Helper()
	v := stAllow(t, l, principal)
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
func stSleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// cases are the properties checked for every algorithm.
var storeCases = []struct {
	name string
	run  func(t *testing.T, h storeHarness, alg rate.Algorithm)
}{
	{"ExactParallel", testExactParallel},
	{"ExactWeighted", testExactWeighted},
	{"Window", testWindow},
	{"Reset", testReset},
	{"TakeBack", testTakeBack},
	{"Peek", testPeek},
	{"Weights", testWeights},
	{"PolicyConflict", testPolicyConflict},
	{"Reopen", testReopen},
	{"TwoInstances", testTwoInstances},
}

// skew is how far the suite lets the store's clock and the wall clock it
// reads stray apart, and a verdict's times be rounded (to the store's
// millisecond or microsecond).
const storeSkew = 50 * time.Millisecond

// hitAll has clients goroutines, released together, each count one
// request of weight(i) for principal on lims[i%len(lims)]; it returns the
// sum of the weights allowed. An error fails t.
func stHitAll(t *testing.T, lims []*rate.Limiter, principal string, clients int, weight func(i int) int) int64 {
	t.Helper()
	var (
		sum   atomic.Int64
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range clients {
		l, w := lims[i%len(lims)], weight(i)
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
			defer cancel()
			v, err := l.AllowN(ctx, principal, w)
			if err != nil {
				t.Errorf("AllowN(%q, %d): %v", principal, w, err)
				return
			}
			if v.Allowed {
				sum.Add(int64(w))
			}
		})
	}
	close(start)
	wg.Wait()
	return sum.Load()
}

func stOne(int) int { return 1 }

// 400 clients at once against a limit of 100 in a long window: exactly 100
// are allowed, and the state agrees.
func testExactParallel(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit, clients = 100, 400
	n := h.storeNode(t)
	l := n.limiter(t, storePolicy{alg: alg, limit: limit, window: time.Hour}, "exact")
	if got := stHitAll(t, []*rate.Limiter{l}, "p", clients, stOne); got != limit {
		t.Errorf("%d requests at once, limit %d: %d allowed, want exactly %d", clients, limit, got, limit)
	}
	if v := stPeek(t, l, "p"); v.Allowed || v.Remaining != 0 {
		t.Errorf("after the limit was used up: Peek %+v, want refused with 0 remaining", v)
	}
}

// Weighted requests at once never overshoot the limit, and stop short of
// it only by less than the heaviest weight: any request that still fitted
// when it arrived was allowed.
func testExactWeighted(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit, clients, heaviest = 100, 200, 5
	n := h.storeNode(t)
	l := n.limiter(t, storePolicy{alg: alg, limit: limit, window: time.Hour}, "weighted")
	got := stHitAll(t, []*rate.Limiter{l}, "p", clients, func(i int) int { return 1 + i%heaviest })
	if got > limit || got <= limit-heaviest {
		t.Errorf("weights 1..%d at once, limit %d: %d allowed in all, want in (%d, %d]", heaviest, limit, got, limit-heaviest, limit)
	}
	if v := stPeek(t, l, "p"); v.Remaining != limit-got {
		t.Errorf("after %d of %d was allowed: Peek says %d remaining, want %d", got, limit, v.Remaining, limit-got)
	}
}

// Each algorithm at a window's edge, on short windows.
func testWindow(t *testing.T, h storeHarness, alg rate.Algorithm) {
	switch alg {
	case rate.FixedWindow:
		testFixedWindow(t, h)
	case rate.SlidingWindow:
		testSlidingWindow(t, h)
	case rate.GCRA:
		testGCRAEmission(t, h)
	default:
		t.Fatalf("no window test for %s", alg)
	}
}

// A fixed window refuses until it closes, tells the client so, and counts
// from zero after.
func testFixedWindow(t *testing.T, h storeHarness) {
	const limit, window = 3, time.Second
	l := h.storeNode(t).limiter(t, storePolicy{alg: rate.FixedWindow, limit: limit, window: window}, "fixed")
	first := time.Now()
	stAllowAll(t, l, "p", limit)
	v := stRefused(t, l, "p", "a request past the limit in an open window")
	if !v.RetryAt.Equal(v.ResetAt) {
		t.Errorf("fixed window: RetryAt %v, ResetAt %v; want both the window's close", v.RetryAt, v.ResetAt)
	}
	if lo, hi := first.Add(window-storeSkew), time.Now().Add(window+storeSkew); v.RetryAt.Before(lo) || v.RetryAt.After(hi) {
		t.Errorf("fixed window: RetryAt %v after the first hit, want about the window, %v", v.RetryAt.Sub(first), window)
	}
	stSleepUntil(v.RetryAt.Add(storeSkew))
	if v := stAllow(t, l, "p"); !v.Allowed || v.Remaining != limit-1 {
		t.Fatalf("after the window closed: %+v, want allowed with %d remaining (the count starts over)", v, limit-1)
	}
	stAllowAll(t, l, "p", limit-1)
	stRefused(t, l, "p", "a request past the limit in the new window")
}

// A sliding window still weighs the previous window's count right after
// the boundary, and lets requests back in as it decays. The weights are
// judged by when the answers came back: a loaded machine (-race beside
// busy loops) can answer a request sent just after the boundary a quarter
// of a window later, when an allowance is right. Such a try proves
// nothing, and a fresh key tries again, for up to a minute.
func testSlidingWindow(t *testing.T, h storeHarness) {
	l := h.storeNode(t).limiter(t, storePolicy{alg: rate.SlidingWindow, limit: 4, window: time.Second}, "sliding")
	untilJudged(t, "answered too late after the boundary to judge", func(principal string) bool {
		return slidingWindowOnce(t, l, principal)
	})
}

// untilJudged runs once with a fresh principal until a try can be judged
// (once reports false when the machine was too slow to tell), for up to
// a minute; why says what made a try unjudgeable.
func untilJudged(t *testing.T, why string, once func(principal string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for try := 1; !once(fmt.Sprint("p", try)); try++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d tries in a minute, none judged: each %s", try, why)
		}
		t.Logf("try %d: %s; again with a fresh key", try, why)
	}
}

// slidingWindowOnce runs testSlidingWindow's schedule on principal, and
// reports false if an answer came back too late to judge.
func slidingWindowOnce(t *testing.T, l *rate.Limiter, principal string) (judged bool) {
	t.Helper()
	const limit, window = 4, time.Second
	stAllowAll(t, l, principal, limit)
	sent := time.Now()
	v := stRefused(t, l, principal, "a request past the limit in the first window")
	// A shared store reads its clock when its transaction starts, and the
	// limiter maps that onto the wall clock when the verdict comes back: a
	// verdict's times are late by up to its round trip (the safe side).
	late1 := time.Since(sent)
	// ResetAt is when the count stops weighing, at the next window's end;
	// RetryAt when it has decayed to 3 there, a quarter into it. Both are
	// read from one verdict, so their distance is exact.
	if got, want := v.ResetAt.Sub(v.RetryAt), 3*window/4; got < want-time.Millisecond || got > want+time.Millisecond {
		t.Errorf("sliding window: ResetAt - RetryAt = %v, want %v (RetryAt %v, ResetAt %v)", got, want, v.RetryAt, v.ResetAt)
	}
	boundary := v.ResetAt.Add(-window)
	stSleepUntil(boundary.Add(storeSkew))
	sent = time.Now()
	v = stAllow(t, l, principal)
	late2 := time.Since(sent)
	if v.Allowed {
		if time.Since(boundary) >= window/4-storeSkew {
			return false
		}
		t.Fatalf("%v after the window boundary: allowed (%+v), want refused: the previous window's %d still weigh %d until a quarter into this one",
			time.Since(boundary), v, limit, limit)
	}
	if got, want := v.RetryAt.Sub(boundary), window/4; got < want-storeSkew-late1 || got > want+storeSkew+late2 {
		t.Errorf("sliding window: refused after the boundary with RetryAt %v after it, want %v", got, want)
	}
	stSleepUntil(v.RetryAt.Add(storeSkew))
	if v := stAllow(t, l, principal); !v.Allowed {
		t.Fatalf("%v after the boundary: refused (%+v), want allowed as the previous count decays", time.Since(boundary), v)
	}
	v = stAllow(t, l, principal)
	if v.Allowed {
		// The previous count weighs 3 until half into the window.
		if time.Since(boundary) >= window/2-storeSkew {
			return false
		}
		t.Fatalf("%v after the boundary: a second request allowed (%+v), want refused: the previous count still weighs %d",
			time.Since(boundary), v, limit-1)
	}
	return true
}

// GCRA lets the burst through at once, then one request per emission
// interval, and says so in RetryAt: an interval, not the window. The
// schedule runs on the real clock (a shared store's), so a loaded machine
// that takes an interval to send the burst has earned its next request
// back: such a try proves nothing, and a fresh key tries again, for up
// to a minute, as testSlidingWindow does.
func testGCRAEmission(t *testing.T, h storeHarness) {
	const limit, burst, window = 5, 3, time.Second
	l := h.storeNode(t).limiter(t, storePolicy{alg: rate.GCRA, limit: limit, window: window, burst: burst}, "gcra")
	untilJudged(t, "took an emission interval to send its burst", func(principal string) bool {
		return gcraEmissionOnce(t, l, principal)
	})
}

// gcraEmissionOnce runs testGCRAEmission's schedule on principal, and
// reports false if the machine was too slow to judge it.
func gcraEmissionOnce(t *testing.T, l *rate.Limiter, principal string) (judged bool) {
	t.Helper()
	const limit, burst, window = 5, 3, time.Second
	const interval = window / limit
	first := time.Now()
	stAllowAll(t, l, principal, burst)
	v := stAllow(t, l, principal)
	if v.Allowed {
		if time.Since(first) >= interval-storeSkew {
			return false
		}
		t.Fatalf("a request past the burst: allowed (%+v), want refused", v)
	}
	if v.RetryAt.IsZero() {
		t.Errorf("a request past the burst: refusal without RetryAt")
	}
	if v.Limit != burst {
		t.Errorf("GCRA: Limit %d, want the burst %d", v.Limit, burst)
	}
	if lo, hi := first.Add(interval-storeSkew), time.Now().Add(interval+storeSkew); v.RetryAt.Before(lo) || v.RetryAt.After(hi) {
		t.Errorf("GCRA: RetryAt %v after the first hit, want about the emission interval %v (the window is %v)",
			v.RetryAt.Sub(first), interval, window)
	}
	if lo, hi := first.Add(burst*interval-storeSkew), time.Now().Add(burst*interval+storeSkew); v.ResetAt.Before(lo) || v.ResetAt.After(hi) {
		t.Errorf("GCRA: ResetAt %v after the first hit, want about burst × interval, %v", v.ResetAt.Sub(first), burst*interval)
	}
	stSleepUntil(v.RetryAt.Add(storeSkew / 2))
	if v := stAllow(t, l, principal); !v.Allowed {
		t.Fatalf("an interval after the burst: refused (%+v), want one more allowed", v)
	}
	// The next request is due an interval later still. A loaded machine
	// may take that long to send it, so an allow counts against the
	// limiter only when it came before the interval could have passed.
	if v2 := stAllow(t, l, principal); v2.Allowed && time.Now().Before(v.RetryAt.Add(interval-storeSkew)) {
		t.Fatalf("a second request within the same interval: allowed (%+v), want refused", v2)
	}
	return true
}

// Reset gives the full allowance back, durably enough that it counts
// from zero, and leaves an unknown principal alone.
func testReset(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit = 3
	l := h.storeNode(t).limiter(t, storePolicy{alg: alg, limit: limit, window: time.Hour}, "reset")
	stAllowAll(t, l, "p", limit)
	stRefused(t, l, "p", "past the limit before Reset")
	stReset(t, l, "p")
	// A reset's epoch may start up to a millisecond ahead of the store's
	// clock, so that it never starts where the old epoch did; until then a
	// GCRA bucket holds that millisecond back. Wait it out, no longer.
	deadline := time.Now().Add(time.Second)
	v := stPeek(t, l, "p")
	for v.Remaining != limit && time.Now().Before(deadline) {
		v = stPeek(t, l, "p")
	}
	if !v.Allowed || v.Remaining != limit {
		t.Errorf("after Reset: Peek %+v, want %d remaining", v, limit)
	}
	stAllowAll(t, l, "p", limit)
	stRefused(t, l, "p", "past the limit after Reset")
	stReset(t, l, "never-seen")
	if v := stPeek(t, l, "never-seen"); v.Remaining != limit {
		t.Errorf("Reset of a principal never seen: Peek %+v, want %d remaining", v, limit)
	}
}

// A Set whose second limiter refuses gives the first one's hit back.
func testTakeBack(t *testing.T, h storeHarness, alg rate.Algorithm) {
	n := h.storeNode(t)
	keyed := func(name string) rate.Options {
		return rate.Options{Name: name, KeyFunc: func(*http.Request) (string, error) { return "p", nil }}
	}
	a, err := n.newLimiterWith(storePolicy{alg: alg, limit: 10, window: time.Hour}, keyed("wide"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.newLimiterWith(storePolicy{alg: alg, limit: 1, window: time.Hour}, keyed("narrow"))
	if err != nil {
		t.Fatal(err)
	}
	served := rate.All(a, b).Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	status := func() int {
		rec := httptest.NewRecorder()
		served.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code
	}
	if got := status(); got != http.StatusOK {
		t.Fatalf("first request through the set: %d, want 200", got)
	}
	for i := range 5 {
		if got := status(); got != http.StatusTooManyRequests {
			t.Fatalf("request %d past the narrow limit: %d, want 429", i+2, got)
		}
	}
	// The take-backs went to p's actor before the responses were written,
	// so a Peek sent now is ordered after them.
	if v := stPeek(t, a, "p"); v.Remaining != 9 {
		t.Errorf("the wide limiter after 1 served and 5 refused by the narrow one: %d remaining, want 9 (the refused requests' hits given back)", v.Remaining)
	}
}

// Peek counts nothing and tells what the next Allow decides.
func testPeek(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit = 5
	l := h.storeNode(t).limiter(t, storePolicy{alg: alg, limit: limit, window: time.Hour}, "peek")
	for range 3 {
		if v := stPeek(t, l, "p"); !v.Allowed || v.Remaining != limit || v.Limit != limit {
			t.Fatalf("Peek of a fresh principal: %+v, want allowed, %d remaining of %d", v, limit, limit)
		}
	}
	for i := range limit + 2 {
		p := stPeek(t, l, "p")
		v := stAllow(t, l, "p")
		switch {
		case p.Allowed != v.Allowed:
			t.Fatalf("request %d: Peek said allowed %v (%+v), Allow decided %v (%+v)", i+1, p.Allowed, p, v.Allowed, v)
		case v.Allowed && v.Remaining != p.Remaining-1:
			t.Errorf("request %d: Peek said %d remaining, Allow left %d", i+1, p.Remaining, v.Remaining)
		case !v.Allowed && p.Remaining != 0:
			t.Errorf("request %d: refused, but Peek said %d remaining", i+1, p.Remaining)
		}
	}
}

// Weights count as that many requests; one heavier than anything the
// policy allows is an error (413 in the middleware), not a refusal, and
// counts nothing.
func testWeights(t *testing.T, h storeHarness, alg rate.Algorithm) {
	p := storePolicy{alg: alg, limit: 10, window: time.Hour}
	if alg == rate.GCRA {
		p.burst = 4
	}
	most := p.most()
	n := h.storeNode(t)
	l := n.limiter(t, p, "weights")
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	if _, err := l.AllowN(ctx, "p", most+1); !errors.Is(err, rate.ErrOverLimit) {
		t.Errorf("AllowN(%d) with %s: %v, want rate.ErrOverLimit", most+1, p, err)
	}
	if _, err := l.AllowN(ctx, "p", 0); !errors.Is(err, rate.ErrWeight) {
		t.Errorf("AllowN(0): %v, want rate.ErrWeight", err)
	}
	if v := stPeek(t, l, "p"); v.Remaining != int64(most) {
		t.Errorf("after two failed AllowN: %d remaining, want %d (nothing counted)", v.Remaining, most)
	}
	if v := stAllowN(t, l, "p", most-1); !v.Allowed || v.Remaining != 1 {
		t.Errorf("AllowN(%d) of %d: %+v, want allowed with 1 remaining", most-1, most, v)
	}
	if v := stAllowN(t, l, "p", 2); v.Allowed {
		t.Errorf("AllowN(2) with 1 remaining: allowed (%+v), want refused", v)
	}
	if v := stAllowN(t, l, "p", 1); !v.Allowed || v.Remaining != 0 {
		t.Errorf("AllowN(1) with 1 remaining: %+v, want allowed (the refused 2 counted nothing)", v)
	}

	heavy, err := n.newLimiterWith(p, rate.Options{Name: "heavy", Weight: func(*http.Request) int { return most + 1 }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	heavy.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a request of weight %d through the middleware: %d, want 413", most+1, rec.Code)
	}
}

// A second limiter of one Name under another policy is refused while the
// first counts (in another instance too, on a shared store), and accepted
// once it has closed.
func testPolicyConflict(t *testing.T, h storeHarness, alg rate.Algorithm) {
	base := storePolicy{alg: alg, limit: 10, window: time.Hour}
	n := h.storeNode(t)
	first := n.limiter(t, base, "policy")
	others := []storePolicy{
		{alg: alg, limit: 11, window: time.Hour},
		{alg: alg, limit: 10, window: 2 * time.Hour},
	}
	for _, a := range storeAlgorithms {
		if a != alg {
			others = append(others, storePolicy{alg: a, limit: 10, window: time.Hour})
		}
	}
	if alg == rate.GCRA {
		others = append(others, storePolicy{alg: alg, limit: 10, window: time.Hour, burst: 5})
	}
	refuse := func(n *storeNode, where string) {
		t.Helper()
		for _, o := range others {
			_, err := n.newLimiter(o, "policy")
			switch {
			case errors.Is(err, store.ErrPolicyConflict):
			case errors.Is(err, driver.ErrAlgorithm) && o.alg != alg:
				// Refused all the same; the other algorithm's own subtest
				// fails for the driver's lack of it.
				t.Logf("%s: %s refused with %v rather than a conflict", where, o, err)
			default:
				t.Errorf("%s: a second limiter %q of %s while one of %s counts: %v, want store.ErrPolicyConflict", where, "policy", o, base, err)
			}
		}
	}
	refuse(n, "same store")
	if _, ok := n.st.(driver.SharedCounters); ok {
		refuse(h.nodeOn(t, n.db), "another instance")
	}
	if _, err := n.newLimiter(others[0], "other-name"); err != nil {
		t.Errorf("another policy under another name: %v, want accepted", err)
	}
	n.closeLimiter(t, first)
	if _, err := n.newLimiter(others[0], "policy"); err != nil {
		t.Errorf("another policy once the first limiter closed: %v, want accepted", err)
	}
}

// Counts survive a clean shutdown: limiters, pool and store closed, the
// store opened again on the same database.
func testReopen(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit, used = 5, 3
	p := storePolicy{alg: alg, limit: limit, window: time.Hour}
	n := h.storeNode(t)
	l := n.limiter(t, p, "reopen")
	stAllowAll(t, l, "p", used)
	stAllowAll(t, l, "q", limit)
	n.stop(t)

	m := h.nodeOn(t, n.db)
	l = m.limiter(t, p, "reopen")
	if v := stPeek(t, l, "p"); v.Remaining != limit-used {
		t.Errorf("after reopening: Peek %+v, want %d remaining (%d of %d counted before the close)", v, limit-used, used, limit)
	}
	stAllowAll(t, l, "p", limit-used)
	stRefused(t, l, "p", "past the limit, counting across the reopen")
	stRefused(t, l, "q", "a principal that used its limit before the close")
}

// Two instances on one shared database count one principal at once:
// exactly the limit is allowed across both.
func testTwoInstances(t *testing.T, h storeHarness, alg rate.Algorithm) {
	const limit, clients = 100, 400
	a := h.storeNode(t)
	if _, ok := a.st.(driver.SharedCounters); !ok {
		t.Skipf("%T is an exclusive store: one process per database", a.st)
	}
	b := h.nodeOn(t, a.db)
	p := storePolicy{alg: alg, limit: limit, window: time.Hour}
	lims := []*rate.Limiter{a.limiter(t, p, "shared"), b.limiter(t, p, "shared")}
	if got := stHitAll(t, lims, "p", clients, stOne); got != limit {
		t.Errorf("%d requests at once across two instances, limit %d: %d allowed, want exactly %d", clients, limit, got, limit)
	}
	for i, l := range lims {
		if v := stPeek(t, l, "p"); v.Remaining != 0 {
			t.Errorf("instance %d after the limit was used up: %d remaining, want 0", i, v.Remaining)
		}
	}
}
