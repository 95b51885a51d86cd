package redis

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// openTest opens a store on the shared server under a fresh prefix.
func openTest(t *testing.T) *Store {
	t.Helper()
	c := redistest.Client(t)
	s, err := Open(context.Background(), c, Options{Prefix: redistest.Prefix(t, c), Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// hit runs one AddHit (n > 0) or PeekHit (n == 0) and waits for it.
func hit(t *testing.T, s *Store, key string, rule driver.Rule, n int64) driver.Hit {
	t.Helper()
	type answer struct {
		h   driver.Hit
		err error
	}
	ch := make(chan answer, 1)
	done := func(h driver.Hit, err error) { ch <- answer{h, err} }
	var err error
	if n == 0 {
		err = s.PeekHit(key, rule, done)
	} else {
		err = s.AddHit(key, rule, n, driver.Lease{}, done)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.h
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
	}
	return driver.Hit{}
}

type replayRule struct {
	alg          algorithm.Algorithm
	limit, burst int64
	window       time.Duration
}

func (r replayRule) String() string {
	return fmt.Sprintf("%s %d per %s burst %d", r.alg, r.limit, r.window, r.burst)
}

// same reports whether the script's state and the rule's are one: equal,
// or for GCRA, whose busy epochs the scripts do not re-anchor, the same
// theoretical arrival time.
func same(rule driver.Rule, a, b driver.State) bool {
	if rule.Algorithm() == "gcra" {
		tat := func(s driver.State) time.Time { return s.Start.Add(time.Duration(s.Count) * rule.Interval()) }
		return tat(a).Equal(tat(b)) || (a.Count == 0 && b.Count == 0)
	}
	return a.Start.Equal(b.Start) && a.Count == b.Count && a.Prev == b.Prev
}

// Random sequences of hits and peeks, on windows of a few milliseconds so
// that they cross many windows, through the Lua scripts on a real server
// and through rate's rule at the clock each script read: every decision
// and every state must agree.
func TestScriptsDecideAsTheRule(t *testing.T) {
	s := openTest(t)
	rules := []replayRule{
		{algorithm.Fixed, 3, 0, 4 * time.Millisecond},
		{algorithm.Fixed, 5, 0, 2500 * time.Microsecond}, // not whole ms: the window closes at its ceiling
		{algorithm.Sliding, 4, 0, 5 * time.Millisecond},
		{algorithm.Sliding, 10, 0, 3 * time.Millisecond},
		{algorithm.GCRA, 3, 0, 10 * time.Millisecond}, // T = 3.333334 ms
		{algorithm.GCRA, 7, 3, time.Millisecond},      // T = 142.858 µs
		{algorithm.GCRA, 5, 9, 7 * time.Millisecond},  // T = 1.4 ms
	}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i, rr := range rules {
		rule := algorithm.MustRule(rr.alg, rr.limit, rr.window, rr.burst)
		most := rule.Room(rule.Advance(driver.State{}, time.Now()), time.Now())
		key := fmt.Sprintf("rate:replay%d:p:x", i)
		var model driver.State
		allowed, refused := 0, 0
		for op := range 400 {
			n := rng.Int64N(most) + 1
			if rng.IntN(5) == 0 {
				n = 0 // a peek
			}
			h := hit(t, s, key, rule, n)
			st := rule.Advance(model, h.Now)
			if n == 0 {
				if !same(rule, st, h.State) {
					t.Fatalf("%s op %d: peek at %v: script %+v, rule %+v", rr, op, h.Now.UnixMilli(), h.State, st)
				}
				continue
			}
			want := n <= rule.Room(st, h.Now)
			if h.Allowed != want {
				t.Fatalf("%s op %d: hit of %d at %v on %+v: script allowed %v, rule %v (room %d)",
					rr, op, n, h.Now.UnixMilli(), st, h.Allowed, want, rule.Room(st, h.Now))
			}
			if want {
				st.Count += n
				allowed++
			} else {
				refused++
			}
			if !same(rule, st, h.State) {
				t.Fatalf("%s op %d: hit of %d at %v: script state %+v, rule %+v", rr, op, n, h.Now.UnixMilli(), h.State, st)
			}
			if want {
				// A refused hit changes nothing: the stored state stays
				// as it was, not advanced (the sliding window's Advance
				// is not idempotent across two window lengths).
				model = st
			}
			if rng.IntN(3) == 0 {
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond) // time passing, not sync
			}
		}
		if allowed == 0 || refused == 0 {
			t.Errorf("%s: %d allowed, %d refused: the sequence did not exercise both", rr, allowed, refused)
		}
	}
}

// States at the edge of what the scripts must compute exactly (limits up
// to algorithm.MaxLimit, windows up to algorithm.MaxWindow, where the sliding
// window's products exceed 2^53 and GCRA's instants need nanoseconds
// beyond a double's reach), written into Redis directly: the script's
// verdict on a hit sized at the rule's Room, and one heavier, must be the
// rule's at the clock the script read.
func TestScriptsExactAtExtremes(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	rules := []replayRule{
		{algorithm.Sliding, int64(algorithm.MaxLimit), 0, algorithm.MaxWindow},
		{algorithm.Sliding, int64(algorithm.MaxLimit) - 12345, 0, 3*365*24*time.Hour + 7*time.Millisecond},
		{algorithm.Sliding, 1000003, 0, 999983 * time.Millisecond},
		{algorithm.Fixed, int64(algorithm.MaxLimit), 0, algorithm.MaxWindow - time.Nanosecond},
		{algorithm.GCRA, 7, 6, algorithm.MaxWindow}, // the deepest bucket rate.New accepts at MaxWindow
		{algorithm.GCRA, int64(algorithm.MaxLimit), 0, 1000 * time.Hour},
		{algorithm.GCRA, 1000003, 999, 24*time.Hour + 1},
	}
	for i, rr := range rules {
		rule := algorithm.MustRule(rr.alg, rr.limit, rr.window, rr.burst)
		now := time.Now()
		most := rule.Room(rule.Advance(driver.State{}, now), now)
		for j := range 40 {
			key := fmt.Sprintf("rate:extreme%d:p:%d", i, j)
			// A state some way into its epoch, with counts near the limit.
			var st driver.State
			switch rr.alg {
			case algorithm.GCRA:
				c := rng.Int64N(most) + 1
				lag := time.Duration(rng.Int64N(int64(time.Duration(c) * rule.Interval())))
				st = driver.State{Start: now.Add(-lag).Truncate(time.Millisecond), Count: c}
			default:
				e := time.Duration(rng.Int64N(int64(rr.window/time.Millisecond))) * time.Millisecond
				st = driver.State{Start: now.Add(-e).Truncate(time.Millisecond), Count: rng.Int64N(most/2 + 1)}
				if rr.alg == algorithm.Sliding {
					st.Prev = most - rng.Int64N(most/4+1)
				}
			}
			ck := s.counterKey(key)
			err := s.c.HSet(ctx, ck, "s", st.Start.UnixMilli(), "c", st.Count, "p", st.Prev, "w", ceilMS(rr.window)).Err()
			if err == nil {
				err = s.c.PExpire(ctx, ck, time.Hour).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			room := rule.Room(rule.Advance(st, time.Now()), time.Now())
			for _, n := range []int64{room, room + 1, room - 1} {
				if n < 1 || n > most {
					continue
				}
				h := hit(t, s, key, rule, n)
				adv := rule.Advance(st, h.Now)
				want := n <= rule.Room(adv, h.Now)
				if h.Allowed != want {
					t.Fatalf("%s: hit of %d at %v on %+v: script allowed %v, rule %v (room %d)",
						rr, n, h.Now.UnixMilli(), adv, h.Allowed, want, rule.Room(adv, h.Now))
				}
				if want {
					adv.Count += n
				}
				if !same(rule, adv, h.State) {
					t.Fatalf("%s: hit of %d: script state %+v, rule %+v", rr, n, h.State, adv)
				}
				if want {
					st = adv
				}
			}
		}
	}
}

// The scripts' exact comparison of products (the sliding window's
// prev × (W − e) against (limit − count − n) × W) against math/big, on
// products far beyond 2^53 that differ by one: where doubles round both
// to one value.
func TestScriptProductsExact(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const probe = luaCommon + `return le(mul(tonumber(ARGV[1]), tonumber(ARGV[2])), mul(tonumber(ARGV[3]), tonumber(ARGV[4]))) and 1 or 0`
	rng := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	check := func(a, b, c, d int64) {
		t.Helper()
		got, err := s.c.Eval(ctx, probe, []string{"k"}, a, b, c, d).Int64()
		if err != nil {
			t.Fatal(err)
		}
		x := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		y := new(big.Int).Mul(big.NewInt(c), big.NewInt(d))
		if want := x.Cmp(y) <= 0; (got == 1) != want {
			t.Fatalf("%d×%d <= %d×%d: script %v, want %v", a, b, c, d, got == 1, want)
		}
	}
	const top = 1<<53 - 1
	check(top, top, top, top)
	check(top, top, top, top-1)
	check(top-1, top, top, top)
	for range 300 {
		// w and d coprime-ish: p = d⁻¹ mod w makes p×d = l×w + 1, which
		// doubles cannot tell from l×w.
		w := rng.Int64N(1<<40) + 1<<39
		d := rng.Int64N(w-1) + 1
		p := new(big.Int).ModInverse(big.NewInt(d), big.NewInt(w))
		if p == nil {
			continue
		}
		l := new(big.Int).Div(new(big.Int).Sub(new(big.Int).Mul(p, big.NewInt(d)), big.NewInt(1)), big.NewInt(w))
		check(p.Int64(), d, l.Int64(), w)   // one more: refused
		check(p.Int64(), d, l.Int64()+1, w) // fits
		check(rng.Int64N(top), rng.Int64N(top), rng.Int64N(top), rng.Int64N(top))
	}
}
