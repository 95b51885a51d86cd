package storetest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// cases are the properties checked for every algorithm.
var cases = []struct {
	name string
	run  func(t *testing.T, h Harness, alg rate.Algorithm)
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
const skew = 50 * time.Millisecond

// hitAll has clients goroutines, released together, each count one
// request of weight(i) for principal on lims[i%len(lims)]; it returns the
// sum of the weights allowed. An error fails t.
func hitAll(t *testing.T, lims []*rate.Limiter, principal string, clients int, weight func(i int) int) int64 {
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
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
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

func one(int) int { return 1 }

// 400 clients at once against a limit of 100 in a long window: exactly 100
// are allowed, and the state agrees.
func testExactParallel(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit, clients = 100, 400
	n := h.node(t)
	l := n.limiter(t, policy{alg: alg, limit: limit, window: time.Hour}, "exact")
	if got := hitAll(t, []*rate.Limiter{l}, "p", clients, one); got != limit {
		t.Errorf("%d requests at once, limit %d: %d allowed, want exactly %d", clients, limit, got, limit)
	}
	if v := peek(t, l, "p"); v.Allowed || v.Remaining != 0 {
		t.Errorf("after the limit was used up: Peek %+v, want refused with 0 remaining", v)
	}
}

// Weighted requests at once never overshoot the limit, and stop short of
// it only by less than the heaviest weight: any request that still fitted
// when it arrived was allowed.
func testExactWeighted(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit, clients, heaviest = 100, 200, 5
	n := h.node(t)
	l := n.limiter(t, policy{alg: alg, limit: limit, window: time.Hour}, "weighted")
	got := hitAll(t, []*rate.Limiter{l}, "p", clients, func(i int) int { return 1 + i%heaviest })
	if got > limit || got <= limit-heaviest {
		t.Errorf("weights 1..%d at once, limit %d: %d allowed in all, want in (%d, %d]", heaviest, limit, got, limit-heaviest, limit)
	}
	if v := peek(t, l, "p"); v.Remaining != limit-got {
		t.Errorf("after %d of %d was allowed: Peek says %d remaining, want %d", got, limit, v.Remaining, limit-got)
	}
}

// Each algorithm at a window's edge, on short windows.
func testWindow(t *testing.T, h Harness, alg rate.Algorithm) {
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
func testFixedWindow(t *testing.T, h Harness) {
	const limit, window = 3, time.Second
	l := h.node(t).limiter(t, policy{alg: rate.FixedWindow, limit: limit, window: window}, "fixed")
	first := time.Now()
	allowAll(t, l, "p", limit)
	v := refused(t, l, "p", "a request past the limit in an open window")
	if !v.RetryAt.Equal(v.ResetAt) {
		t.Errorf("fixed window: RetryAt %v, ResetAt %v; want both the window's close", v.RetryAt, v.ResetAt)
	}
	if lo, hi := first.Add(window-skew), time.Now().Add(window+skew); v.RetryAt.Before(lo) || v.RetryAt.After(hi) {
		t.Errorf("fixed window: RetryAt %v after the first hit, want about the window, %v", v.RetryAt.Sub(first), window)
	}
	sleepUntil(v.RetryAt.Add(skew))
	if v := allow(t, l, "p"); !v.Allowed || v.Remaining != limit-1 {
		t.Fatalf("after the window closed: %+v, want allowed with %d remaining (the count starts over)", v, limit-1)
	}
	allowAll(t, l, "p", limit-1)
	refused(t, l, "p", "a request past the limit in the new window")
}

// A sliding window still weighs the previous window's count right after
// the boundary, and lets requests back in as it decays.
func testSlidingWindow(t *testing.T, h Harness) {
	const limit, window = 4, time.Second
	l := h.node(t).limiter(t, policy{alg: rate.SlidingWindow, limit: limit, window: window}, "sliding")
	allowAll(t, l, "p", limit)
	sent := time.Now()
	v := refused(t, l, "p", "a request past the limit in the first window")
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
	sleepUntil(boundary.Add(skew))
	sent = time.Now()
	v = allow(t, l, "p")
	late2 := time.Since(sent)
	if v.Allowed {
		t.Fatalf("%v after the window boundary: allowed (%+v), want refused: the previous window's %d still weigh %d until a quarter into this one",
			time.Since(boundary), v, limit, limit)
	}
	if got, want := v.RetryAt.Sub(boundary), window/4; got < want-skew-late1 || got > want+skew+late2 {
		t.Errorf("sliding window: refused after the boundary with RetryAt %v after it, want %v", got, want)
	}
	sleepUntil(v.RetryAt.Add(skew))
	if v := allow(t, l, "p"); !v.Allowed {
		t.Fatalf("%v after the boundary: refused (%+v), want allowed as the previous count decays", time.Since(boundary), v)
	}
	v = allow(t, l, "p")
	if v.Allowed {
		t.Fatalf("%v after the boundary: a second request allowed (%+v), want refused: the previous count still weighs %d",
			time.Since(boundary), v, limit-1)
	}
}

// GCRA lets the burst through at once, then one request per emission
// interval, and says so in RetryAt: an interval, not the window.
func testGCRAEmission(t *testing.T, h Harness) {
	const limit, burst, window = 5, 3, time.Second
	const interval = window / limit
	l := h.node(t).limiter(t, policy{alg: rate.GCRA, limit: limit, window: window, burst: burst}, "gcra")
	first := time.Now()
	allowAll(t, l, "p", burst)
	v := refused(t, l, "p", "a request past the burst")
	if v.Limit != burst {
		t.Errorf("GCRA: Limit %d, want the burst %d", v.Limit, burst)
	}
	if lo, hi := first.Add(interval-skew), time.Now().Add(interval+skew); v.RetryAt.Before(lo) || v.RetryAt.After(hi) {
		t.Errorf("GCRA: RetryAt %v after the first hit, want about the emission interval %v (the window is %v)",
			v.RetryAt.Sub(first), interval, window)
	}
	if lo, hi := first.Add(burst*interval-skew), time.Now().Add(burst*interval+skew); v.ResetAt.Before(lo) || v.ResetAt.After(hi) {
		t.Errorf("GCRA: ResetAt %v after the first hit, want about burst × interval, %v", v.ResetAt.Sub(first), burst*interval)
	}
	sleepUntil(v.RetryAt.Add(skew / 2))
	if v := allow(t, l, "p"); !v.Allowed {
		t.Fatalf("an interval after the burst: refused (%+v), want one more allowed", v)
	}
	refused(t, l, "p", "a second request within the same interval")
}

// Reset gives the full allowance back, durably enough that it counts
// from zero, and leaves an unknown principal alone.
func testReset(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit = 3
	l := h.node(t).limiter(t, policy{alg: alg, limit: limit, window: time.Hour}, "reset")
	allowAll(t, l, "p", limit)
	refused(t, l, "p", "past the limit before Reset")
	reset(t, l, "p")
	if v := peek(t, l, "p"); !v.Allowed || v.Remaining != limit {
		t.Errorf("after Reset: Peek %+v, want %d remaining", v, limit)
	}
	allowAll(t, l, "p", limit)
	refused(t, l, "p", "past the limit after Reset")
	reset(t, l, "never-seen")
	if v := peek(t, l, "never-seen"); v.Remaining != limit {
		t.Errorf("Reset of a principal never seen: Peek %+v, want %d remaining", v, limit)
	}
}

// A Set whose second limiter refuses gives the first one's hit back.
func testTakeBack(t *testing.T, h Harness, alg rate.Algorithm) {
	n := h.node(t)
	keyed := func(name string) rate.Options {
		return rate.Options{Name: name, KeyFunc: func(*http.Request) (string, error) { return "p", nil }}
	}
	a, err := n.newLimiterWith(policy{alg: alg, limit: 10, window: time.Hour}, keyed("wide"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.newLimiterWith(policy{alg: alg, limit: 1, window: time.Hour}, keyed("narrow"))
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
	if v := peek(t, a, "p"); v.Remaining != 9 {
		t.Errorf("the wide limiter after 1 served and 5 refused by the narrow one: %d remaining, want 9 (the refused requests' hits given back)", v.Remaining)
	}
}

// Peek counts nothing and tells what the next Allow decides.
func testPeek(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit = 5
	l := h.node(t).limiter(t, policy{alg: alg, limit: limit, window: time.Hour}, "peek")
	for range 3 {
		if v := peek(t, l, "p"); !v.Allowed || v.Remaining != limit || v.Limit != limit {
			t.Fatalf("Peek of a fresh principal: %+v, want allowed, %d remaining of %d", v, limit, limit)
		}
	}
	for i := range limit + 2 {
		p := peek(t, l, "p")
		v := allow(t, l, "p")
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
func testWeights(t *testing.T, h Harness, alg rate.Algorithm) {
	p := policy{alg: alg, limit: 10, window: time.Hour}
	if alg == rate.GCRA {
		p.burst = 4
	}
	most := p.most()
	n := h.node(t)
	l := n.limiter(t, p, "weights")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := l.AllowN(ctx, "p", most+1); !errors.Is(err, rate.ErrOverLimit) {
		t.Errorf("AllowN(%d) with %s: %v, want rate.ErrOverLimit", most+1, p, err)
	}
	if _, err := l.AllowN(ctx, "p", 0); !errors.Is(err, rate.ErrWeight) {
		t.Errorf("AllowN(0): %v, want rate.ErrWeight", err)
	}
	if v := peek(t, l, "p"); v.Remaining != int64(most) {
		t.Errorf("after two failed AllowN: %d remaining, want %d (nothing counted)", v.Remaining, most)
	}
	if v := allowN(t, l, "p", most-1); !v.Allowed || v.Remaining != 1 {
		t.Errorf("AllowN(%d) of %d: %+v, want allowed with 1 remaining", most-1, most, v)
	}
	if v := allowN(t, l, "p", 2); v.Allowed {
		t.Errorf("AllowN(2) with 1 remaining: allowed (%+v), want refused", v)
	}
	if v := allowN(t, l, "p", 1); !v.Allowed || v.Remaining != 0 {
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
func testPolicyConflict(t *testing.T, h Harness, alg rate.Algorithm) {
	base := policy{alg: alg, limit: 10, window: time.Hour}
	n := h.node(t)
	first := n.limiter(t, base, "policy")
	others := []policy{
		{alg: alg, limit: 11, window: time.Hour},
		{alg: alg, limit: 10, window: 2 * time.Hour},
	}
	for _, a := range Algorithms {
		if a != alg {
			others = append(others, policy{alg: a, limit: 10, window: time.Hour})
		}
	}
	if alg == rate.GCRA {
		others = append(others, policy{alg: alg, limit: 10, window: time.Hour, burst: 5})
	}
	refuse := func(n *node, where string) {
		t.Helper()
		for _, o := range others {
			_, err := n.newLimiter(o, "policy")
			switch {
			case errors.Is(err, store.ErrPolicyConflict):
			case errors.Is(err, store.ErrAlgorithm) && o.alg != alg:
				// Refused all the same; the other algorithm's own subtest
				// fails for the driver's lack of it.
				t.Logf("%s: %s refused with %v rather than a conflict", where, o, err)
			default:
				t.Errorf("%s: a second limiter %q of %s while one of %s counts: %v, want store.ErrPolicyConflict", where, "policy", o, base, err)
			}
		}
	}
	refuse(n, "same store")
	if _, ok := n.st.(store.SharedCounters); ok {
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
func testReopen(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit, used = 5, 3
	p := policy{alg: alg, limit: limit, window: time.Hour}
	n := h.node(t)
	l := n.limiter(t, p, "reopen")
	allowAll(t, l, "p", used)
	allowAll(t, l, "q", limit)
	n.stop(t)

	m := h.nodeOn(t, n.db)
	l = m.limiter(t, p, "reopen")
	if v := peek(t, l, "p"); v.Remaining != limit-used {
		t.Errorf("after reopening: Peek %+v, want %d remaining (%d of %d counted before the close)", v, limit-used, used, limit)
	}
	allowAll(t, l, "p", limit-used)
	refused(t, l, "p", "past the limit, counting across the reopen")
	refused(t, l, "q", "a principal that used its limit before the close")
}

// Two instances on one shared database count one principal at once:
// exactly the limit is allowed across both.
func testTwoInstances(t *testing.T, h Harness, alg rate.Algorithm) {
	const limit, clients = 100, 400
	a := h.node(t)
	if _, ok := a.st.(store.SharedCounters); !ok {
		t.Skipf("%T is an exclusive store: one process per database", a.st)
	}
	b := h.nodeOn(t, a.db)
	p := policy{alg: alg, limit: limit, window: time.Hour}
	lims := []*rate.Limiter{a.limiter(t, p, "shared"), b.limiter(t, p, "shared")}
	if got := hitAll(t, lims, "p", clients, one); got != limit {
		t.Errorf("%d requests at once across two instances, limit %d: %d allowed, want exactly %d", clients, limit, got, limit)
	}
	for i, l := range lims {
		if v := peek(t, l, "p"); v.Remaining != 0 {
			t.Errorf("instance %d after the limit was used up: %d remaining, want 0", i, v.Remaining)
		}
	}
}
