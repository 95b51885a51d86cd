package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

type testCase struct {
	name string
	run  func(t *testing.T, h Harness, alg algorithm.Algorithm)
}

// sharedCases are the properties of a store that decides every hit
// (driver.SharedCounters), checked for every algorithm.
var sharedCases = []testCase{
	{"ExactParallel", testExactParallel},
	{"ExactWeighted", testExactWeighted},
	{"TwoInstances", testTwoInstances},
	{"Window", testWindow},
	{"Reset", testReset},
	{"TakeBack", testTakeBack},
	{"Peek", testPeek},
	{"Weights", testWeights},
	{"Reopen", testReopenShared},
}

// exclusiveCases are the properties of a store whose process is its
// counters' only writer (driver.ExclusiveCounters): the limiter decides in
// memory, and the store keeps the rows it writes through.
var exclusiveCases = []testCase{
	{"ParallelNewestWins", testNewestWins},
	{"Expires", testExpires},
	{"Reopen", testReopenExclusive},
	{"Timeline", testTimeline},
}

// commonCases hold for either kind.
var commonCases = []testCase{
	{"PolicyConflict", testPolicyConflict},
}

// 400 hits at once against a limit of 100 in a long window: exactly what
// the rule admits at once is allowed, and the state agrees.
func testExactParallel(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const clients = 400
	r := ruleOf(alg, 100, time.Hour, 0)
	n := h.node(t)
	n.claim(t, policyOf("exact", r))
	if got := hitAll(t, []*node{n}, "rate:exact:p", r, clients, one); got != r.Most() {
		t.Errorf("%d hits at once, %d fit: %d allowed, want exactly %d", clients, r.Most(), got, r.Most())
	}
	if room := n.room(t, "rate:exact:p", r); room != 0 {
		t.Errorf("after the limit was used up: the state admits %d, want 0", room)
	}
}

// Weighted hits at once never overshoot the limit, and stop short of it
// only by less than the heaviest weight: any hit that still fitted when it
// arrived was allowed.
func testExactWeighted(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const clients, heaviest = 200, 5
	r := ruleOf(alg, 100, time.Hour, 0)
	n := h.node(t)
	n.claim(t, policyOf("weighted", r))
	got := hitAll(t, []*node{n}, "rate:weighted:p", r, clients, func(i int) int64 { return int64(1 + i%heaviest) })
	if most := r.Most(); got > most || got <= most-heaviest {
		t.Errorf("weights 1..%d at once, %d fit: %d allowed in all, want in (%d, %d]", heaviest, most, got, most-heaviest, most)
	}
	if room := n.room(t, "rate:weighted:p", r); room != r.Most()-got {
		t.Errorf("after %d of %d was allowed: the state admits %d, want %d", got, r.Most(), room, r.Most()-got)
	}
}

// Two instances on one database count one key at once: exactly the limit
// is allowed across both.
func testTwoInstances(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const clients = 400
	r := ruleOf(alg, 100, time.Hour, 0)
	a := h.node(t)
	b := h.nodeOn(t, a.db)
	a.claim(t, policyOf("shared", r))
	b.claim(t, policyOf("shared", r))
	if got := hitAll(t, []*node{a, b}, "rate:shared:p", r, clients, one); got != r.Most() {
		t.Errorf("%d hits at once across two instances, %d fit: %d allowed, want exactly %d", clients, r.Most(), got, r.Most())
	}
	for i, n := range []*node{a, b} {
		if room := n.room(t, "rate:shared:p", r); room != 0 {
			t.Errorf("instance %d after the limit was used up: the state admits %d, want 0", i, room)
		}
	}
}

// Hits across several short windows, a few milliseconds apart: each is
// decided as the rule decides on the state the store last reported,
// advanced to the store's clock, so that the store carries out the
// algorithm's arithmetic at the window's edges exactly as the rule does.
// The schedule must see refusals and allowances after them (the window
// moved), or it proved nothing: it runs for three windows and then until
// it has seen both, for up to windowDeadline. A fixed three windows saw
// neither on a loaded machine (-race beside busy loops), where a few hits
// took a whole window.
func testWindow(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const window = 200 * time.Millisecond
	r := ruleOf(alg, 4, window, 0)
	n := h.node(t)
	n.claim(t, policyOf("window", r))
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var (
		prev             driver.State
		prevNow          time.Time
		refused, revived int
		lastRefused      bool
	)
	start := time.Now()
	for hits := 0; time.Since(start) < 3*window || refused == 0 || revived == 0; hits++ {
		if time.Since(start) > windowDeadline {
			t.Fatalf("%d hits in %s: %d refusals, %d allowances after one; the schedule never met the limit or never saw it lift",
				hits, windowDeadline, refused, revived)
		}
		w := int64(1 + rng.IntN(2))
		got := n.hit(t, "rate:window:p", r, w)
		if got.Now.Before(prevNow) {
			t.Fatalf("the store's clock went back from %v to %v", prevNow, got.Now)
		}
		model := r.Advance(prev, got.Now)
		room := r.Room(model, got.Now)
		want := w <= room
		if got.Allowed != want {
			t.Fatalf("weight %d at %v: allowed %v, the rule says %v (state before %+v, advanced %+v, room %d)",
				w, got.Now.Sub(prevNow), got.Allowed, want, prev, model, room)
		}
		wantRoom := room
		if want {
			wantRoom -= w
		}
		if after := r.Room(got.State, got.Now); after != wantRoom {
			t.Fatalf("weight %d, allowed %v: the state after admits %d, the rule says %d (state %+v, rule's %+v)",
				w, got.Allowed, after, wantRoom, got.State, model)
		}
		switch {
		case !got.Allowed:
			refused++
		case lastRefused:
			revived++
		}
		lastRefused = !got.Allowed
		prev, prevNow = got.State, got.Now
		time.Sleep(time.Duration(rng.IntN(int(window / 10)))) // time passing at the window's edges, not synchronisation
	}
}

// windowDeadline bounds how long testWindow waits to see a refusal and an
// allowance after one.
const windowDeadline = 30 * time.Second

// ResetHit gives the full allowance back and leaves an unknown key alone.
func testReset(t *testing.T, h Harness, alg algorithm.Algorithm) {
	r := ruleOf(alg, 3, time.Hour, 0)
	n := h.node(t)
	n.claim(t, policyOf("reset", r))
	const key = "rate:reset:p"
	useUp(t, n, key, r)
	n.reset(t, key)
	n.untilStarted(t, key, r)
	if room := n.room(t, key, r); room != r.Most() {
		t.Errorf("after ResetHit: the state admits %d, want %d", room, r.Most())
	}
	useUp(t, n, key, r)
	n.reset(t, "rate:reset:never-seen")
	if room := n.room(t, "rate:reset:never-seen", r); room != r.Most() {
		t.Errorf("ResetHit of a key never seen: the state admits %d, want %d", room, r.Most())
	}
}

// useUp counts hits of weight 1 on key until the rule's Most have been
// allowed, and checks the next is refused.
func useUp(t *testing.T, n *node, key string, r driver.Rule) {
	t.Helper()
	most := r.(algorithm.Rule).Most()
	for i := range most {
		if h := n.hit(t, key, r, 1); !h.Allowed {
			t.Fatalf("hit %d of %d: refused (%+v), want allowed", i+1, most, h)
		}
	}
	if h := n.hit(t, key, r, 1); h.Allowed {
		t.Fatalf("hit past the %d that fit: allowed (%+v), want refused", most, h)
	}
}

// TakeBack removes hits from the epoch they were counted in, never below
// zero, not from another epoch, and before a hit queued after it.
func testTakeBack(t *testing.T, h Harness, alg algorithm.Algorithm) {
	r := ruleOf(alg, 10, time.Hour, 0)
	n := h.node(t)
	n.claim(t, policyOf("takeback", r))
	const key = "rate:takeback:p"
	var last driver.Hit
	for range 3 {
		last = n.hit(t, key, r, 1)
	}
	start := last.State.Start
	n.takeBack(t, key, start.Add(time.Millisecond), 1)
	if room := n.room(t, key, r); room != r.Most()-3 {
		t.Errorf("a take-back for another epoch: the state admits %d, want %d (nothing taken)", room, r.Most()-3)
	}
	n.takeBack(t, key, start, 2)
	if room := n.room(t, key, r); room != r.Most()-1 {
		t.Errorf("2 of 3 hits taken back: the state admits %d, want %d", room, r.Most()-1)
	}
	n.takeBack(t, key, start, 100)
	if room := n.room(t, key, r); room != r.Most() {
		t.Errorf("more taken back than was counted: the state admits %d, want %d (the count stops at zero)", room, r.Most())
	}

	// Used up, then a take-back and a hit queued together, without waiting
	// for the take-back: the hit finds the room it gave back.
	for range r.Most() {
		last = n.hit(t, key, r, 1)
	}
	s := n.shared(t)
	back := make(chan error, 1)
	if err := s.TakeBack(key, last.State.Start, 1, func(err error) { back <- err }); err != nil {
		t.Fatalf("TakeBack: %v", err)
	}
	got := n.hit(t, key, r, 1)
	if err := <-back; err != nil {
		t.Fatalf("TakeBack: %v", err)
	}
	if !got.Allowed {
		t.Errorf("a hit queued after a take-back of the used-up key: refused (%+v), want allowed", got)
	}
}

// PeekHit counts nothing and tells what the next AddHit decides.
func testPeek(t *testing.T, h Harness, alg algorithm.Algorithm) {
	r := ruleOf(alg, 5, time.Hour, 0)
	n := h.node(t)
	n.claim(t, policyOf("peek", r))
	const key = "rate:peek:p"
	for range 3 {
		if room := n.room(t, key, r); room != r.Most() {
			t.Fatalf("PeekHit of a fresh key: admits %d, want %d", room, r.Most())
		}
	}
	for i := range r.Most() + 2 {
		room := n.room(t, key, r)
		got := n.hit(t, key, r, 1)
		switch {
		case got.Allowed != (room >= 1):
			t.Fatalf("hit %d: PeekHit said %d fit, AddHit allowed %v (%+v)", i+1, room, got.Allowed, got)
		case got.Allowed && r.Room(got.State, got.Now) != room-1:
			t.Errorf("hit %d: PeekHit said %d fit, AddHit left %d", i+1, room, r.Room(got.State, got.Now))
		}
	}
}

// A hit of weight n counts n; one heavier than the room is refused and
// counts nothing. With a burst, if the algorithm takes one, the heaviest
// hit is the burst.
func testWeights(t *testing.T, h Harness, alg algorithm.Algorithm) {
	rules := []algorithm.Rule{ruleOf(alg, 10, time.Hour, 0)}
	if b, err := alg.Rule(10, time.Hour, 4); err == nil {
		rules = append(rules, b)
	}
	n := h.node(t)
	for i, r := range rules {
		name := fmt.Sprintf("weights%d", i)
		n.claim(t, policyOf(name, r))
		key := "rate:" + name + ":p"
		most := r.Most()
		if got := n.hit(t, key, r, most+1); got.Allowed {
			t.Errorf("%s: weight %d of %d: allowed (%+v), want refused", name, most+1, most, got)
		}
		if room := n.room(t, key, r); room != most {
			t.Errorf("%s: after a refused hit: the state admits %d, want %d (nothing counted)", name, room, most)
		}
		if got := n.hit(t, key, r, most-1); !got.Allowed || r.Room(got.State, got.Now) != 1 {
			t.Errorf("%s: weight %d of %d: %+v, want allowed with 1 left", name, most-1, most, got)
		}
		if got := n.hit(t, key, r, 2); got.Allowed {
			t.Errorf("%s: weight 2 with 1 left: allowed (%+v), want refused", name, got)
		}
		if got := n.hit(t, key, r, 1); !got.Allowed || r.Room(got.State, got.Now) != 0 {
			t.Errorf("%s: weight 1 with 1 left: %+v, want allowed with none left (the refused 2 counted nothing)", name, got)
		}
	}
}

// A shared store's counts survive its close: a store opened again on the
// database finds them.
func testReopenShared(t *testing.T, h Harness, alg algorithm.Algorithm) {
	h.reopens(t)
	r := ruleOf(alg, 5, time.Hour, 0)
	n := h.node(t)
	release := n.claim(t, policyOf("reopen", r))
	for range 3 {
		n.hit(t, "rate:reopen:p", r, 1)
	}
	useUp(t, n, "rate:reopen:q", r)
	release()
	n.stop(t)

	m := h.nodeOn(t, n.db)
	m.claim(t, policyOf("reopen", r))
	if room := m.room(t, "rate:reopen:p", r); room != r.Most()-3 {
		t.Errorf("after reopening: the state admits %d, want %d (3 counted before the close)", room, r.Most()-3)
	}
	if got := m.hit(t, "rate:reopen:q", r, 1); got.Allowed {
		t.Errorf("a key that used its limit before the close: allowed (%+v), want refused", got)
	}
}

// Rows written through at once from many goroutines, each key's in order
// without waiting for the commits: once they have committed, each key
// loads as its newest row, here and after a reopen; a newer row with a
// lower count (a reset) wins too.
func testNewestWins(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const keys, rows = 50, 20
	r := ruleOf(alg, 1000, time.Hour, 0)
	n := h.node(t)
	st := n.exclusive(t)
	now := st.Now()
	var (
		wg     sync.WaitGroup
		errs   = make(chan error, keys*(rows+1))
		start  = make(chan struct{})
		newest = make([]driver.Counter, keys)
	)
	for k := range keys {
		key := fmt.Sprintf("rate:newest:k%d", k)
		s := r.Advance(driver.State{}, now)
		last := r.Row(key, s, rows)
		if k%2 == 1 { // a reset: a new epoch, later, with nothing in it
			last = r.Row(key, driver.State{Start: now.Add(time.Millisecond)}, 0)
		}
		newest[k] = last
		wg.Go(func() {
			<-start
			for i := int64(1); i <= rows; i++ {
				wg.Add(1)
				if err := st.SaveCounter(r.Row(key, s, i), func(err error) { errs <- err; wg.Done() }); err != nil {
					errs <- err
					wg.Done()
				}
			}
			if k%2 == 1 {
				wg.Add(1)
				if err := st.SaveCounter(last, func(err error) { errs <- err; wg.Done() }); err != nil {
					errs <- err
					wg.Done()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("SaveCounter: %v", err)
		}
	}
	// A reset row of an algorithm whose empty state holds nothing back
	// ends where it starts: then neither it nor the rows it superseded
	// may load.
	check := func(where string, now time.Time, loaded map[string]driver.Counter) {
		t.Helper()
		live := 0
		for _, want := range newest {
			got, ok := loaded[want.Key]
			switch {
			case !want.End().After(now):
				if ok {
					t.Errorf("%s: %s loaded as %+v, want nothing: its newest row %+v has ended", where, want.Key, got, want)
				}
				continue
			case !ok:
				t.Errorf("%s: %s not loaded, want count %d", where, want.Key, want.Count)
			case got.Count != want.Count || !sameMS(got.Start, want.Start) || got.Prev != want.Prev:
				t.Errorf("%s: %s loaded as %+v, want its newest row %+v", where, want.Key, got, want)
			}
			live++
		}
		if len(loaded) != live {
			t.Errorf("%s: %d keys loaded, want %d", where, len(loaded), live)
		}
	}
	now = st.Now()
	check("open store", now, n.load(t, now))
	if h.Forgets {
		return
	}
	n.stop(t)
	m := h.nodeOn(t, n.db)
	now = m.exclusive(t).Now()
	check("after a reopen", now, m.load(t, now))
}

// A row loads while its state can hold anything back, until the rule's
// Expires (or the window's close, for a row without one), and not from
// then on.
func testExpires(t *testing.T, h Harness, alg algorithm.Algorithm) {
	const window = time.Minute
	r := ruleOf(alg, 5, window, 0)
	n := h.node(t)
	now := n.exclusive(t).Now()
	s := r.Advance(driver.State{}, now)
	s.Count = 2
	c := r.Row("rate:expires:p", s, 2)
	n.save(t, c)
	end := c.End()
	if !end.After(now) {
		t.Fatalf("the rule's row %+v ends at %v, before now %v", c, end, now)
	}
	if _, ok := n.load(t, end.Add(-time.Millisecond))[c.Key]; !ok {
		t.Errorf("a millisecond before the row ends (%v): not loaded, want loaded", end)
	}
	if got, ok := n.load(t, end)[c.Key]; ok {
		t.Errorf("at the row's end (%v): loaded %+v, want gone", end, got)
	}
}

// A limiter's state written through survives a clean close: the rows
// loaded back, resumed under the same rule, admit what the state in memory
// admitted, for a key part-used and one used up.
func testReopenExclusive(t *testing.T, h Harness, alg algorithm.Algorithm) {
	h.reopens(t)
	r := ruleOf(alg, 5, time.Hour, 0)
	n := h.node(t)
	st := n.exclusive(t)
	want := map[string]int64{}
	for key, hits := range map[string]int64{"rate:reopen:p": 3, "rate:reopen:q": r.Most()} {
		now := st.Now()
		s := r.Advance(driver.State{}, now)
		for range hits {
			s = r.Advance(s, st.Now())
			if r.Room(s, st.Now()) < 1 {
				t.Fatalf("the rule refused hit of %d", hits)
			}
			s.Count++
			n.save(t, r.Row(key, s, s.Count))
		}
		want[key] = r.Most() - hits
	}
	n.stop(t)

	m := h.nodeOn(t, n.db)
	now := m.exclusive(t).Now()
	loaded := m.load(t, now)
	for key, room := range want {
		c, ok := loaded[key]
		if !ok {
			t.Errorf("after reopening: %s not loaded", key)
			continue
		}
		s := r.Advance(r.Resume(c, now), now)
		if got := r.Room(s, now); got != room {
			t.Errorf("after reopening: %s admits %d, want %d (row %+v)", key, got, room, c)
		}
	}
}

// The store's timeline never runs behind what it has persisted: a row
// whose window starts ahead of the wall clock (written before the clock
// was set back) puts Now at or past its start after a reopen, so that a
// clock set back grants no allowance.
func testTimeline(t *testing.T, h Harness, alg algorithm.Algorithm) {
	h.reopens(t)
	r := ruleOf(alg, 5, time.Hour, 0)
	n := h.node(t)
	ahead := n.exclusive(t).Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	s := driver.State{Start: ahead, Count: 1}
	n.save(t, r.Row("rate:timeline:p", s, 1))
	n.stop(t)
	m := h.nodeOn(t, n.db)
	if now := m.exclusive(t).Now(); now.Before(ahead) {
		t.Errorf("after reopening: Now %v, before the persisted start %v", now, ahead)
	}
}

// A second claim of one Name under another policy is refused while the
// first holds (in another instance too, on a shared store), and accepted
// once it is released; another Name is free.
func testPolicyConflict(t *testing.T, h Harness, alg algorithm.Algorithm) {
	base := ruleOf(alg, 10, time.Hour, 0)
	others := []driver.Policy{
		policyOf("policy", ruleOf(alg, 11, time.Hour, 0)),
		policyOf("policy", ruleOf(alg, 10, 2*time.Hour, 0)),
	}
	if b, err := alg.Rule(10, time.Hour, 5); err == nil {
		others = append(others, policyOf("policy", b))
	}
	for _, a := range algorithm.All() {
		if a.Name() != alg.Name() {
			others = append(others, policyOf("policy", ruleOf(a, 10, time.Hour, 0)))
		}
	}
	n := h.node(t)
	release := n.claim(t, policyOf("policy", base))
	refuse := func(n *node, where string) {
		t.Helper()
		for _, o := range others {
			rel, err := n.tryClaim(o)
			switch {
			case errors.Is(err, store.ErrPolicyConflict):
			case errors.Is(err, driver.ErrAlgorithm) && o.Algorithm != alg.Name():
				// Refused all the same: the driver has no statements for it.
			default:
				if rel != nil {
					rel()
				}
				t.Errorf("%s: a second claim of %s while %s holds: %v, want store.ErrPolicyConflict", where, o, policyOf("policy", base), err)
			}
		}
	}
	refuse(n, "same store")
	if _, ok := n.st.(driver.SharedCounters); ok {
		refuse(h.nodeOn(t, n.db), "another instance")
	}
	other := others[0]
	other.Name = "other-name"
	n.claim(t, other)
	release()
	n.claim(t, others[0])
}

// sameMS reports whether a and b are one instant at the stores'
// resolution, a millisecond.
func sameMS(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }
