package redis

// Faults injected into the Redis driver while hits are
// in flight, and the invariant every one of them must keep — a hit
// answered allowed is counted in Redis (stored ≥ allowed), nothing is
// counted twice or without a request (stored ≤ allowed + failed), and the
// limit holds (allowed ≤ limit).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// tally is what the clients were told, in weight.
type tally struct{ allowed, refused, failed atomic.Int64 }

func (t *tally) String() string {
	return fmt.Sprintf("allowed %d, refused %d, failed %d", t.allowed.Load(), t.refused.Load(), t.failed.Load())
}

// attackRules are one key per algorithm, all long enough that no window
// turns over during a test, so that the stored count "c" is the sum of
// what was counted.
func attackRules(limit int64) []driver.Rule {
	return []driver.Rule{
		algorithm.MustRule(algorithm.Fixed, limit, time.Hour, 0),
		algorithm.MustRule(algorithm.Sliding, limit, time.Hour, 0),
		algorithm.MustRule(algorithm.GCRA, limit, 100*time.Hour, 0),
	}
}

// hammer sends hits of weight 1 to 3 from g goroutines, each waiting for
// its answer (at most wait) before the next, on the rules' keys (key i for
// rule i), until stop closes.
func hammer(s *Store, keys []string, rules []driver.Rule, g int, stop <-chan struct{}, tallies []*tally) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(len(keys))
				n := rng.Int64N(3) + 1
				ch := make(chan error, 1)
				var allowed bool
				err := s.AddHit(keys[i], rules[i], n, driver.Lease{}, func(h driver.Hit, err error) { allowed = h.Allowed; ch <- err })
				if err == nil {
					err = <-ch
				}
				switch {
				case err != nil:
					tallies[i].failed.Add(n)
					time.Sleep(5 * time.Millisecond) // a failing server: do not spin
				case allowed:
					tallies[i].allowed.Add(n)
				default:
					tallies[i].refused.Add(n)
				}
			}
		}()
	}
	return &wg
}

// stored reads key's count straight from Redis, retrying while it is
// unreachable.
func stored(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := s.c.HGet(ctx, s.counterKey(key), "c").Int64()
		cancel()
		if err == nil || errors.Is(err, goredis.Nil) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkCounts asserts the invariant for every key and logs the figures.
func checkCounts(t *testing.T, s *Store, keys []string, rules []driver.Rule, limit int64, tallies []*tally) {
	t.Helper()
	for i, k := range keys {
		c := stored(t, s, k)
		a, f := tallies[i].allowed.Load(), tallies[i].failed.Load()
		t.Logf("%s: stored %d; %s", rules[i].Algorithm(), c, tallies[i])
		if c < a {
			t.Errorf("%s: %d answered allowed but only %d stored: allowed without being counted", rules[i].Algorithm(), a, c)
		}
		if c > a+f {
			t.Errorf("%s: stored %d > allowed %d + failed %d: counted twice", rules[i].Algorithm(), c, a, f)
		}
		if a > limit {
			t.Errorf("%s: allowed %d > limit %d", rules[i].Algorithm(), a, limit)
		}
	}
}

func newTallies(n int) []*tally {
	ts := make([]*tally, n)
	for i := range ts {
		ts[i] = &tally{}
	}
	return ts
}

// SIGSTOP pauses just under and just over Options.Timeout, and SCRIPT
// FLUSH, while four clients hammer: no allowed hit goes uncounted, none
// is counted twice.
func TestPauseAroundTimeout(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testPauseAroundTimeout(t, false) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { testPauseAroundTimeout(t, true) })
}

func testPauseAroundTimeout(t *testing.T, ctxTimeout bool) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { c.Close() })
	const timeout = 100 * time.Millisecond
	// Open's own round trips are bounded by the same 100 ms, which a
	// loaded machine can miss before any pause: that is not what this
	// test checks, so Open may try again until the server answers in time.
	var s *Store
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if s, err = Open(context.Background(), c, Options{Timeout: timeout}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	const limit = 200000 // not reached: every pause lands while hits count
	rules := attackRules(limit)
	keys := []string{"rate:f:p:a", "rate:s:p:a", "rate:g:p:a"}
	tallies := newTallies(len(keys))
	stop := make(chan struct{})
	wg := hammer(s, keys, rules, 4, stop, tallies)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	for i, d := range []int{60, 90, 98, 102, 110, 150, 300, 95, 105, 99, 101, 250} {
		time.Sleep(40 * time.Millisecond)
		srv.Pause()
		time.Sleep(time.Duration(d) * time.Millisecond)
		srv.Resume()
		if i%3 == 2 {
			admin.ScriptFlush(context.Background())
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	time.Sleep(1500 * time.Millisecond) // late pipelines land (ReadTimeout 1s)
	checkCounts(t, s, keys, rules, limit, tallies)
}

// kill -9 of an appendfsync-always server, twice, while clients hammer a
// small limit: every allowed hit survives, and the limit holds across the
// restarts.
func TestKill9Durable(t *testing.T) {
	srv := redistest.StartDurableServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{RequireDurable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	const limit = 8000
	rules := attackRules(limit)
	keys := []string{"rate:f:p:a", "rate:s:p:a", "rate:g:p:a"}
	tallies := newTallies(len(keys))
	stop := make(chan struct{})
	wg := hammer(s, keys, rules, 4, stop, tallies)
	for range 3 {
		time.Sleep(120 * time.Millisecond)
		srv.Kill9()
		srv.Restart()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	checkCounts(t, s, keys, rules, limit, tallies)
}

// Two instances (two clients, two stores) on one server hammer one key per
// algorithm with weights: together they admit the limit exactly, and what
// they admitted is what Redis holds.
func TestTwoInstancesWeights(t *testing.T) {
	c1, c2 := redistest.Client(t), redistest.Client(t)
	prefix := redistest.Prefix(t, c1)
	s1, err := Open(context.Background(), c1, Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s1.Close(context.Background()) })
	s2, err := Open(context.Background(), c2, Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close(context.Background()) })
	const limit = 3000
	rules := attackRules(limit)
	keys := []string{"rate:f:p:a", "rate:s:p:a", "rate:g:p:a"}
	t1, t2 := newTallies(3), newTallies(3)
	stop := make(chan struct{})
	w1 := hammer(s1, keys, rules, 3, stop, t1)
	w2 := hammer(s2, keys, rules, 3, stop, t2)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for i := range keys {
			if t1[i].refused.Load()+t2[i].refused.Load() < 300 {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	w1.Wait()
	w2.Wait()
	for i, k := range keys {
		// Fill what weights of 2 and 3 left.
		for range 3 {
			if hit(t, s1, k, rules[i], 1).Allowed {
				t1[i].allowed.Add(1)
			}
		}
		a := t1[i].allowed.Load() + t2[i].allowed.Load()
		f := t1[i].failed.Load() + t2[i].failed.Load()
		c := stored(t, s1, k)
		t.Logf("%s: stored %d; instance 1 %s; instance 2 %s", rules[i].Algorithm(), c, t1[i], t2[i])
		if a != limit || c != limit || f != 0 {
			t.Errorf("%s: allowed %d, stored %d, failed %d; want %d, %d, 0", rules[i].Algorithm(), a, c, f, limit, limit)
		}
	}
}

// Random rules rate.New accepts (sub-millisecond GCRA intervals, limits
// up to algorithm.MaxLimit, windows up to algorithm.MaxWindow), on random states
// written into Redis: the script's verdict and state on hits sized at the
// rule's Room, one more and one less, and on a random weight, must be the
// Go rule's at the clock the script read.
func TestRandomRulesAgainstGo(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	pick := func(hi int64) int64 { // log-uniform in [1, hi]
		b := rng.IntN(64 - clz(uint64(hi)))
		v := int64(1)<<b + rng.Int64N(int64(1)<<b)
		return min(max(v, 1), hi)
	}
	checked := 0
	for i := range 300 {
		alg := []algorithm.Algorithm{algorithm.Fixed, algorithm.Sliding, algorithm.GCRA}[i%3]
		limit := pick(int64(algorithm.MaxLimit))
		window := time.Duration(pick(int64(algorithm.MaxWindow/time.Millisecond))) * time.Millisecond
		if rng.IntN(4) == 0 {
			window += time.Duration(rng.Int64N(int64(time.Millisecond)))
			window = min(window, algorithm.MaxWindow)
		}
		burst := int64(0)
		if alg == algorithm.GCRA && rng.IntN(2) == 0 {
			burst = pick(int64(algorithm.MaxLimit))
		}
		rule, ok := tryRule(alg, limit, window, burst)
		if !ok {
			continue
		}
		if _, err := keyOf(rule).args(); err != nil {
			t.Errorf("%s %d per %s burst %d: rate accepts the rule, the store refuses it: %v", alg, limit, window, burst, err)
			continue
		}
		now := time.Now()
		most := rule.Room(rule.Advance(driver.State{}, now), now)
		key := fmt.Sprintf("rate:rnd%d:p:x", i)
		var st driver.State
		w := rule.Window()
		switch alg {
		case algorithm.GCRA:
			c := rng.Int64N(most) + 1
			span := time.Duration(c) * rule.Interval()
			if span <= 0 || span > algorithm.MaxWindow {
				span = algorithm.MaxWindow
			}
			lag := time.Duration(rng.Int64N(int64(span)))
			st = driver.State{Start: now.Add(-lag).Truncate(time.Millisecond), Count: c}
		default:
			e := time.Duration(rng.Int64N(int64(w/time.Millisecond)+1)) * time.Millisecond
			st = driver.State{Start: now.Add(-e).Truncate(time.Millisecond), Count: rng.Int64N(most + 1)}
			if alg == algorithm.Sliding {
				st.Prev = rng.Int64N(most + 1)
			}
		}
		ck := s.counterKey(key)
		if err := s.c.HSet(ctx, ck, "s", st.Start.UnixMilli(), "c", st.Count, "p", st.Prev, "w", ceilMS(w)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.c.PExpire(ctx, ck, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		room := rule.Room(rule.Advance(st, time.Now()), time.Now())
		for _, n := range []int64{room, room + 1, room - 1, rng.Int64N(most) + 1, 0} {
			if n < 0 || n > most {
				continue
			}
			h := hit(t, s, key, rule, n)
			adv := rule.Advance(st, h.Now)
			if n == 0 {
				if !same(rule, adv, h.State) {
					t.Errorf("%s %d per %s burst %d: peek on %+v: script %+v, rule %+v", alg, limit, window, burst, st, h.State, adv)
				}
				continue
			}
			want := n <= rule.Room(adv, h.Now)
			checked++
			if h.Allowed != want {
				t.Errorf("%s %d per %s burst %d: hit of %d at %d on %+v: script %v, rule %v (room %d)",
					alg, limit, window, burst, n, h.Now.UnixMilli(), adv, h.Allowed, want, rule.Room(adv, h.Now))
				break
			}
			if want {
				adv.Count += n
			}
			if !same(rule, adv, h.State) {
				t.Errorf("%s %d per %s burst %d: hit of %d: script state %+v, rule %+v", alg, limit, window, burst, n, h.State, adv)
				break
			}
			if want {
				st = adv
			}
		}
	}
	t.Logf("%d verdicts compared", checked)
}

func clz(x uint64) int {
	n := 0
	for i := 63; i >= 0 && x&(1<<i) == 0; i-- {
		n++
	}
	return n
}

// tryRule is alg's rule, or false where rate.New would refuse it.
func tryRule(alg algorithm.Algorithm, limit int64, window time.Duration, burst int64) (r driver.Rule, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	r = algorithm.MustRule(alg, limit, window, burst)
	if alg == algorithm.GCRA {
		now := time.Now()
		most := r.Room(r.Advance(driver.State{}, now), now)
		if most > int64(algorithm.MaxWindow/r.Interval()) {
			return nil, false
		}
	}
	return r, true
}

// A server with maxmemory and an evicting policy may drop porch's keys
// (volatile-* policies prefer them: every porch key has a TTL): a client
// counted to its limit is then allowed again, silently. Open checks
// durability (appendfsync always, RequireDurable) but not eviction, which
// forgets counts just as a restart does; with RequireDurable it must
// refuse such a server, or a limited client must stay limited.
func TestEvictionForgetsCounts(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.StartDurableServer(t, "--maxmemory", "3mb", "--maxmemory-policy", policy)
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
			t.Cleanup(func() { c.Close() })
			var logs bytes.Buffer
			s, err := Open(context.Background(), c, Options{RequireDurable: true,
				Options: store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
			if err != nil {
				t.Logf("Open refused the evicting server: %v", err)
				return
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			rule := algorithm.MustRule(algorithm.Fixed, 5, time.Hour, 0)
			for range 5 {
				if !hit(t, s, "rate:api:p:alice", rule, 1).Allowed {
					t.Fatal("refused before the limit")
				}
			}
			if hit(t, s, "rate:api:p:alice", rule, 1).Allowed {
				t.Fatal("allowed past the limit")
			}
			// Other data, some with a TTL longer than porch's, fills memory.
			ctx := context.Background()
			val := strings.Repeat("x", 4096)
			for i := range 3000 {
				p := c.Pipeline()
				p.Set(ctx, fmt.Sprintf("app:%d", i), val, 48*time.Hour)
				if _, err := p.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
			evicted, _ := c.Info(ctx, "stats").Result()
			v := hit(t, s, "rate:api:p:alice", rule, 1)
			t.Logf("%s; after filling memory: allowed=%v state=%+v; Open logged %q", infoField(evicted, "evicted_keys"), v.Allowed, v.State, logs.String())
			if v.Allowed {
				t.Errorf("maxmemory-policy %s: the client counted to its limit is allowed again (its key was evicted), and Open neither refused the server nor warned", policy)
			}
		})
	}
}

// A cluster reshards slots (redis-cli --cluster reshard, keys MIGRATEd,
// clients redirected by ASK and MOVED) while clients hammer keys across
// many slots: nothing allowed is lost, nothing is counted twice.
func TestClusterReshard(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	const limit = 100000
	var keys []string
	var rules []driver.Rule
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("rate:r%d:p:user%d", i%3, i))
		rules = append(rules, attackRules(limit)[i%3])
	}
	tallies := newTallies(len(keys))
	stop := make(chan struct{})
	wg := hammer(s, keys, rules, 6, stop, tallies)
	id := func(addr string) string {
		out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1], "cluster", "myid").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	for _, mv := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		out, err := exec.Command("redis-cli", "--cluster", "reshard", addrs[0],
			"--cluster-from", id(addrs[mv[0]]), "--cluster-to", id(addrs[mv[1]]),
			"--cluster-slots", "3000", "--cluster-yes", "--cluster-pipeline", "5").CombinedOutput()
		if err != nil {
			t.Fatalf("reshard: %v\n%s", err, out)
		}
	}
	close(stop)
	wg.Wait()
	var sumA, sumF, sumC int64
	for i, k := range keys {
		a, f := tallies[i].allowed.Load(), tallies[i].failed.Load()
		cnt := stored(t, s, k)
		sumA, sumF, sumC = sumA+a, sumF+f, sumC+cnt
		if cnt < a || cnt > a+f {
			t.Errorf("%s (%s): stored %d; %s", k, rules[i].Algorithm(), cnt, tallies[i])
		}
	}
	t.Logf("60 keys: allowed %d, failed %d, stored %d", sumA, sumF, sumC)
}

// Policy claims across instances: a live instance's policy refuses
// another; once its holder dies without Close (its client closed, so its
// heartbeat stops), the claim expires within claimTTL and the new policy
// is taken.
func TestPolicyHolderDies(t *testing.T) {
	shared := redistest.Client(t)
	prefix := redistest.Prefix(t, shared)
	cA := goredis.NewClient(redistest.Options(t))
	a, err := Open(context.Background(), cA, Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), redistest.Client(t), Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	p1 := driver.Policy{Name: "api", Limit: 5, Window: time.Minute}
	p2 := driver.Policy{Name: "api", Limit: 6, Window: time.Minute}
	if _, err := a.ClaimPolicy(context.Background(), p1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * heartbeatEvery)
	if _, err := b.ClaimPolicy(context.Background(), p2); !errors.Is(err, store.ErrPolicyConflict) {
		t.Fatalf("second policy while the first's holder lives: %v, want ErrPolicyConflict", err)
	}
	cA.Close() // the holder dies: no Close, no more heartbeats
	died := time.Now()
	for {
		_, err := b.ClaimPolicy(context.Background(), p2)
		if err == nil {
			t.Logf("new policy taken %s after the holder died", time.Since(died).Round(time.Millisecond))
			break
		}
		if !errors.Is(err, store.ErrPolicyConflict) || time.Since(died) > claimTTL+3*time.Second {
			t.Fatalf("after the holder died: %v (%s)", err, time.Since(died))
		}
		time.Sleep(200 * time.Millisecond)
	}
	a.Close(context.Background())
}

// Close while hits are queued behind a paused server: Close waits for the
// flush (or returns ctx.Err()), every queued hit is answered, an allowed
// one is counted, and a hit after Close is refused.
func TestCloseWhileQueued(t *testing.T) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ReadTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rule := algorithm.MustRule(algorithm.Fixed, 1000, time.Hour, 0)
	srv.Pause()
	var answered, allowed atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		if err := s.AddHit("rate:c:p:a", rule, 1, driver.Lease{}, func(h driver.Hit, err error) {
			answered.Add(1)
			if err == nil && h.Allowed {
				allowed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = s.Close(ctx)
	cancel()
	t.Logf("Close under a paused server: %v", err)
	srv.Resume()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := s.AddHit("rate:c:p:a", rule, 1, driver.Lease{}, func(driver.Hit, error) {}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("AddHit after Close: %v, want store.ErrClosed", err)
	}
	time.Sleep(1500 * time.Millisecond)
	cnt, _ := c.HGet(context.Background(), s.counterKey("rate:c:p:a"), "c").Int64()
	t.Logf("200 queued: answered %d, allowed %d, stored %d", answered.Load(), allowed.Load(), cnt)
	if cnt < allowed.Load() {
		t.Errorf("allowed %d > stored %d", allowed.Load(), cnt)
	}
}

// Random small rules (windows of a few ms, GCRA intervals under a
// millisecond, weights) replayed in real time through the scripts and the
// Go rule: every decision and state agree across many window turnovers.
func TestRandomReplay(t *testing.T) {
	s := openTest(t)
	rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	for i := range 24 {
		alg := []algorithm.Algorithm{algorithm.Fixed, algorithm.Sliding, algorithm.GCRA}[i%3]
		limit := rng.Int64N(12) + 1
		window := time.Duration(rng.IntN(8)+1) * time.Millisecond
		burst := int64(0)
		if alg == algorithm.GCRA && rng.IntN(2) == 0 {
			burst = rng.Int64N(15) + 1
		}
		rule := algorithm.MustRule(alg, limit, window, burst)
		most := rule.Room(rule.Advance(driver.State{}, time.Now()), time.Now())
		key := fmt.Sprintf("rate:rr%d:p:x", i)
		var model driver.State
		for op := range 150 {
			n := rng.Int64N(most) + 1
			if rng.IntN(6) == 0 {
				n = 0
			}
			h := hit(t, s, key, rule, n)
			st := rule.Advance(model, h.Now)
			if n == 0 {
				if !same(rule, st, h.State) {
					t.Fatalf("%s %d/%s b%d op %d peek: script %+v, rule %+v", alg, limit, window, burst, op, h.State, st)
				}
				continue
			}
			want := n <= rule.Room(st, h.Now)
			if h.Allowed != want {
				t.Fatalf("%s %d/%s b%d op %d: hit %d at %d on %+v: script %v, rule %v", alg, limit, window, burst, op, n, h.Now.UnixMilli(), st, h.Allowed, want)
			}
			if want {
				st.Count += n
				if !same(rule, st, h.State) {
					t.Fatalf("%s %d/%s b%d op %d: script state %+v, rule %+v", alg, limit, window, burst, op, h.State, st)
				}
				model = st
			}
			if rng.IntN(3) == 0 {
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			}
		}
	}
}

// Hostile keys: a 1 MiB principal, binary bytes, braces, and a principal
// spelled as another key's stored form; each counts on its own.
func TestHostileKeys(t *testing.T) {
	s := openTest(t)
	rule := algorithm.MustRule(algorithm.Fixed, 2, time.Hour, 0)
	keys := []string{
		"rate:a:p:" + strings.Repeat("\xff{}", 1<<18),
		"rate:a:p:\x00\xff\r\n*1\r\n",
		"rate:a:p:{x}",
		"rate:a:p:}{",
		"rate:a:p:x",
		"rate:a:p:" + s.counterKey("rate:a:p:x"),
		s.counterKey("rate:a:p:x"),
		"policy:a",
	}
	for i, k := range keys {
		for j := range 3 {
			if got, want := hit(t, s, k, rule, 1).Allowed, j < 2; got != want {
				t.Errorf("key %d (%.40q) hit %d: allowed %v, want %v", i, k, j+1, got, want)
			}
		}
	}
}

// maxmemory with noeviction: once memory is full a hit is either refused
// or failed (OOM), or allowed and stored (Redis 7.0 lets a script without
// flags write past maxmemory); never allowed uncounted.
func TestOOMFailsClosed(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	rule := algorithm.MustRule(algorithm.Fixed, 5, time.Hour, 0)
	ctx := context.Background()
	val := strings.Repeat("x", 4096)
	for i := 0; ; i++ {
		if err := c.Set(ctx, fmt.Sprintf("app:%d", i), val, 0).Err(); err != nil {
			t.Logf("memory full after %d values: %v", i, err)
			break
		}
	}
	ch := make(chan error, 1)
	var h driver.Hit
	if err := s.AddHit("rate:api:p:new", rule, 1, driver.Lease{}, func(x driver.Hit, err error) { h = x; ch <- err }); err != nil {
		t.Fatal(err)
	}
	err = <-ch
	t.Logf("hit on a full server: %+v, %v; Health %v", h, err, s.Health(ctx))
	if err == nil && h.Allowed {
		if n, _ := c.HGet(ctx, s.counterKey("rate:api:p:new"), "c").Int64(); n != 1 {
			t.Errorf("allowed on a full server, stored count %d", n)
		}
	}
}

// NOSCRIPT resends only the calls that did not run, after the ones that
// did: when the server's script cache holds some scripts and not others
// (flushed, then another instance's loadScripts part way through, which
// loads them one round trip at a time), a batch's Reset of a key that
// arrived before a hit on it runs after the hit, and wipes the count of
// a hit already answered allowed: allowed but not counted.
func TestNoscriptReordersResetAndHit(t *testing.T) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{Options: store.Options{CommitDelay: 300 * time.Millisecond}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	rule := algorithm.MustRule(algorithm.Fixed, 10, time.Hour, 0)
	const key = "rate:api:p:alice"
	hit(t, s, key, rule, 1)
	// Batch 1 (a peek elsewhere) holds the committer while the next ops queue.
	first := make(chan error, 1)
	if err := s.PeekHit("rate:api:p:bob", rule, func(_ driver.Hit, err error) { first <- err }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	resetDone := make(chan error, 1)
	if err := s.ResetHit(key, func(err error) { resetDone <- err }); err != nil {
		t.Fatal(err)
	}
	var h driver.Hit
	hitDone := make(chan error, 1)
	if err := s.AddHit(key, rule, 1, driver.Lease{}, func(x driver.Hit, err error) { h = x; hitDone <- err }); err != nil {
		t.Fatal(err)
	}
	// Another instance, after a restart of Redis, has reloaded the first
	// script only.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := scriptFixed.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The reset may fail (errOutOfOrder: its caller retries it); what must
	// never happen is a hit answered allowed whose count the reset erased.
	if err := <-resetDone; err != nil {
		t.Logf("the reset failed alone, to be retried: %v", err)
	}
	if err := <-hitDone; err != nil {
		t.Fatal(err)
	}
	cnt, _ := c.HGet(ctx, s.counterKey(key), "c").Int64()
	t.Logf("reset then hit, in one batch: hit %+v; stored count %d", h, cnt)
	if h.Allowed && cnt < 1 {
		t.Errorf("the hit after the reset was answered allowed (count %d) but Redis holds %d: the reset ran after it", h.State.Count, cnt)
	}
}

// One batch of hits and peeks on several keys and rules runs as one
// script call per run of them (a reset ends a run), and each hit keeps
// its own outcome: the verdicts a serial run gives, and a hit on a key
// holding a foreign value fails alone while the hits around it count.
func TestBatchScriptKeepsEachHitsOutcome(t *testing.T) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{Options: store.Options{CommitDelay: 200 * time.Millisecond}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	if err := c.Set(ctx, s.counterKey("rate:x:p:foreign"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	fixed := algorithm.MustRule(algorithm.Fixed, 3, time.Hour, 0)
	sliding := algorithm.MustRule(algorithm.Sliding, 2, time.Hour, 0)
	gcra := algorithm.MustRule(algorithm.GCRA, 2, time.Hour, 0)
	type step struct {
		key   string
		rule  driver.Rule
		n     int64 // 0: a peek; -1: a reset
		allow bool
		count int64
		fails bool
	}
	steps := []step{
		{key: "rate:f:p:a", rule: fixed, n: 1, allow: true, count: 1},
		{key: "rate:s:p:a", rule: sliding, n: 1, allow: true, count: 1},
		{key: "rate:f:p:a", rule: fixed, n: 2, allow: true, count: 3},
		{key: "rate:x:p:foreign", rule: fixed, n: 1, fails: true},
		{key: "rate:g:p:a", rule: gcra, n: 2, allow: true, count: 2},
		{key: "rate:f:p:a", rule: fixed, n: 1, allow: false, count: 3},
		{key: "rate:s:p:a", rule: sliding, n: 2, allow: false, count: 1},
		{key: "rate:g:p:a", rule: gcra, n: 1, allow: false, count: 2},
		{key: "rate:s:p:a", rule: sliding, n: 1, allow: true, count: 2},
		{key: "rate:f:p:a", rule: fixed, n: 0, allow: false, count: 3},
		{key: "rate:f:p:a", n: -1},
		{key: "rate:f:p:a", rule: fixed, n: 3, allow: true, count: 3},
		{key: "rate:x:p:foreign", rule: fixed, n: 0, fails: true},
		{key: "rate:f:p:a", rule: fixed, n: 1, allow: false, count: 3},
	}
	before := evalshaCalls(t, c)
	// The first hit holds the committer (CommitDelay) while the rest
	// queue into the next batch.
	first := make(chan error, 1)
	if err := s.PeekHit("rate:f:p:other", fixed, func(_ driver.Hit, err error) { first <- err }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	type answer struct {
		h   driver.Hit
		err error
	}
	answers := make([]chan answer, len(steps))
	for i, st := range steps {
		ch := make(chan answer, 1)
		answers[i] = ch
		done := func(h driver.Hit, err error) { ch <- answer{h, err} }
		switch {
		case st.n < 0:
			err = s.ResetHit(st.key, func(err error) { ch <- answer{err: err} })
		case st.n == 0:
			err = s.PeekHit(st.key, st.rule, done)
		default:
			err = s.AddHit(st.key, st.rule, st.n, driver.Lease{}, done)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		a := <-answers[i]
		switch {
		case st.n < 0:
			if a.err != nil {
				t.Errorf("step %d: reset: %v", i, a.err)
			}
		case st.fails:
			if a.err == nil || !strings.Contains(a.err.Error(), "WRONGTYPE") {
				t.Errorf("step %d: %s on a foreign value: %+v, %v; want its own WRONGTYPE error", i, st.key, a.h, a.err)
			}
		case a.err != nil:
			t.Errorf("step %d: %s n=%d: %v", i, st.key, st.n, a.err)
		case a.h.Allowed != st.allow || a.h.State.Count != st.count:
			t.Errorf("step %d: %s n=%d: allowed %v count %d, want %v %d", i, st.key, st.n, a.h.Allowed, a.h.State.Count, st.allow, st.count)
		}
	}
	if err := s.Health(ctx); err != nil {
		t.Errorf("Health after a hit failed alone: %v", err)
	}
	// The peek, then the steps as two runs and the reset between them (3
	// if the peek was still queued when they joined it).
	if n := evalshaCalls(t, c) - before; n > 4 {
		t.Errorf("%d EVALSHA calls for the peek and %d steps, want at most 4: one per run of hits and one for the reset", n, len(steps))
	}
	for k, want := range map[string]int64{"rate:f:p:a": 3, "rate:s:p:a": 2, "rate:g:p:a": 2} {
		if got := stored(t, s, k); got != want {
			t.Errorf("%s: stored %d, want %d", k, got, want)
		}
		// Each expires as its last hit set: within its window (two for
		// a sliding one), never kept for ever.
		if ttl := c.PTTL(ctx, s.counterKey(k)).Val(); ttl <= 0 || ttl > 2*time.Hour {
			t.Errorf("%s: expires in %s", k, ttl)
		}
	}
}

// evalshaCalls reads how many EVALSHA calls c's server has run.
func evalshaCalls(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	v := infoField(info, "cmdstat_evalsha")
	if v == "" {
		return 0 // none yet
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.ParseInt(calls, 10, 64)
	if err != nil {
		t.Fatalf("cmdstat_evalsha %q: %v", v, err)
	}
	return n
}
