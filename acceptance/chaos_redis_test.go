//go:build acceptance

package acceptance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
)

// The Redis chaos leg: two storefronts count on a Sentinel-managed primary
// with two replicas while workers send limited requests from a moving set
// of clients and a fault driver, on a schedule drawn from -seed, kills the
// primary with SIGKILL, hangs it with SIGSTOP for a while (a failover if
// longer than Sentinel's down-after, the old primary then awake beside the
// new one until Sentinel turns it into a replica), asks Sentinel for a
// failover, flushes the primary's scripts, or cuts the replicas off and
// then kills the primary. After every fault the driver waits until the
// topology is whole again (a killed server restarted, rejoined as a
// replica), so faults stay separable. The invariant, per client (the
// window, an hour, outlasts the leg): never more answered 200 than the
// limit, and the count Redis holds at the end never below what was
// answered 200.
//
// The storefronts run with -redis-replicas 2, every replica. With 1 the
// invariant does not hold, and the leg shows it (run it with
// PORCH_CHAOS_REDIS_REPLICAS=1): when the old primary is alive during a
// failover (hung, suspected, or switched over by SENTINEL FAILOVER) it
// keeps answering, and a replica Sentinel has not yet moved to the new
// primary acknowledges its writes; they are lost when both are turned
// into replicas of the new one. Only a WAIT for every replica makes the
// promoted one hold each answered hit, since once it is promoted the old
// primary can no longer reach that count.
//
// It runs for chaosRedisDefault unless -duration says otherwise, like the
// other chaos legs; -seed replays the schedule (not the interleaving of
// real processes).

const (
	chaosRedisDefault = 2 * time.Minute
	chaosRedisOps     = 200 // requests (or bursts) per second, over every worker
	chaosRedisRecent  = 8   // a worker picks among the newest clients...
	chaosRedisNewOne  = 25  // ...and adds one with probability 1/chaosRedisNewOne, so each nears its limit
	chaosRedisSettle  = 60 * time.Second
)

// chaosRedisDuration is -duration if given, else chaosRedisDefault.
func chaosRedisDuration() time.Duration {
	d := chaosRedisDefault
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "duration" {
			d = *chaosDuration
		}
	})
	return d
}

// chaosRedis is the leg's servers, storefronts and what the clients saw.
type chaosRedis struct {
	t       *testing.T
	ss      *redistest.Sentinels
	servers map[string]*redistest.Server // by address: the primary and its replicas
	inst    [2]*storefront

	clients atomic.Int64 // clients made so far; client i sends from chaosRedisIP(i)
	mu      sync.Mutex   // protects seen and odd
	seen    map[int64]map[int]int
	odd     []string    // answers that are neither 200, 429 nor 503 with Retry-After
	served  []time.Time // when each 200 arrived, in order
	spans   spanLog     // the served handlers' spans, by client (chaos_inflight_test.go)
}

func chaosRedisIP(i int64) string {
	return fmt.Sprintf("10.%d.%d.%d", 100+i/65536%100, i/256%256, i%256)
}

func (c *chaosRedis) record(client int64, r reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Err == nil && r.Status == http.StatusOK {
		c.served = append(c.served, time.Now())
		c.spans.add(chaosRedisIP(client), r.Header)
	}
	switch {
	case r.Err == nil && (r.Status == http.StatusOK || r.Status == http.StatusTooManyRequests ||
		r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != ""):
		if c.seen[client] == nil {
			c.seen[client] = map[int]int{}
		}
		c.seen[client][r.Status]++
	default:
		c.odd = append(c.odd, fmt.Sprintf("client %s: %s", chaosRedisIP(client), r))
	}
}

// work sends until ctx ends, one request (or a burst over both instances)
// per tick of pace.
func (c *chaosRedis) work(ctx context.Context, r *rand.Rand, pace <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-pace:
		}
		n := c.clients.Load()
		client := n - 1 - int64(r.IntN(min(chaosRedisRecent, int(n))))
		if r.IntN(chaosRedisNewOne) == 0 {
			client = c.clients.Add(1) - 1
		}
		ip := chaosRedisIP(client)
		if r.IntN(10) == 0 { // a burst, in flight at once on both instances
			var wg sync.WaitGroup
			for i := range 2 + r.IntN(4) {
				s := c.inst[i%2]
				wg.Go(func() { c.record(client, s.try(http.MethodGet, limited, "", "X-Forwarded-For", ip)) })
			}
			wg.Wait()
			continue
		}
		c.record(client, c.inst[r.IntN(2)].try(http.MethodGet, limited, "", "X-Forwarded-For", ip))
	}
}

// The faults, in the order of the kinds fault draws from.
const (
	faultKill = iota
	faultStop
	faultSentinel
	faultScripts
	faultCutKill
	faultKinds
)

// fault injects fault kind f (its details drawn from r), waits until the
// topology is whole again, and names it.
func (c *chaosRedis) fault(r *rand.Rand, f int) string {
	t := c.t
	old := c.ss.Primary()
	p := c.servers[old]
	var others []string
	for a := range c.servers {
		if a != old {
			others = append(others, a)
		}
	}
	sort.Strings(others)
	name := ""
	switch f {
	case faultKill:
		name = "kill -9 primary"
		p.Kill9()
		c.replace(p, old)
	case faultStop:
		d := time.Duration(200+r.IntN(2800)) * time.Millisecond
		name = "SIGSTOP primary"
		p.Pause()
		time.Sleep(d) // how long the primary hangs: the fault itself
		p.Resume()
	case faultSentinel:
		name = "SENTINEL FAILOVER"
		c.failoverUntilNewPrimary(old)
	case faultScripts:
		name = "SCRIPT FLUSH"
		pc := goredis.NewClient(&goredis.Options{Addr: old})
		err := pc.ScriptFlush(t.Context()).Err()
		pc.Close()
		if err != nil {
			t.Fatalf("SCRIPT FLUSH on %s: %v", old, err)
		}
	case faultCutKill:
		name = "replicas cut, kill -9 primary"
		cutReplication(t, old, others...)
		time.Sleep(time.Duration(200+r.IntN(800)) * time.Millisecond) // hits answered (or not) while no replica follows
		p.Kill9()
		rejoinReplication(t, others...)
		c.replace(p, old)
	}
	c.settle()
	return name
}

// replace waits for Sentinel to promote a replica in place of the killed
// primary p (at old), then restarts p, empty, as a replica of the new one,
// as a restart from the configuration Sentinel rewrites would (Sentinel
// itself would convert it too, but only at its next look, up to 10 s on).
func (c *chaosRedis) replace(p *redistest.Server, old string) {
	t := c.t
	now := c.ss.WaitNewPrimary(old)
	p.Restart()
	host, port, _ := net.SplitHostPort(now)
	pc := goredis.NewClient(&goredis.Options{Addr: old})
	defer pc.Close()
	if err := pc.ReplicaOf(t.Context(), host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF %s on the restarted %s: %v", now, old, err)
	}
}

// failover asks a Sentinel for a failover (SENTINEL FAILOVER), retrying
// while Sentinel has no replica it deems good yet (it refreshes what it
// knows of replicas every few seconds) or is still finishing one.
func (c *chaosRedis) failover() {
	t := c.t
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: c.ss.Servers[0].Addr, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(chaosRedisSettle)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := sc.Failover(ctx, c.ss.Name).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !(strings.Contains(err.Error(), "NOGOODSLAVE") || strings.Contains(err.Error(), "INPROG")) {
			t.Fatalf("SENTINEL FAILOVER %s: %v", c.ss.Name, err)
		}
		time.Sleep(100 * time.Millisecond) // Sentinel's view of its replicas is refreshed on its own clock
	}
}

// failoverUntilNewPrimary asks for a failover until Sentinel has made one.
// Sentinel may accept SENTINEL FAILOVER and then abandon it (a replica it
// picked still resynchronising after the last fault, a failover-timeout
// on two loaded cores), and it does not try again on its own, since the
// primary is healthy: the leg asks again, as an operator would, rather
// than fail on Sentinel's liveness, which is not what it checks.
func (c *chaosRedis) failoverUntilNewPrimary(old string) {
	deadline := time.Now().Add(chaosRedisSettle)
	for {
		c.failover()
		asked := time.Now()
		for time.Since(asked) < 10*time.Second {
			if p := c.ss.Primary(); p != old {
				c.ss.WaitNewPrimary(old)
				return
			}
			time.Sleep(100 * time.Millisecond) // Sentinel's view moves on its own clock
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("SENTINEL FAILOVER %s: still %s after asking until %s", c.ss.Name, old, deadline.Format(time.TimeOnly))
		}
		c.t.Logf("SENTINEL FAILOVER %s: no new primary 10s after asking; asking again", c.ss.Name)
	}
}

// settle waits until the topology is whole: every Sentinel names one
// primary, flagged only "master" (no failover under way), and that
// primary has the other two servers online as replicas.
func (c *chaosRedis) settle() {
	t := c.t
	deadline := time.Now().Add(chaosRedisSettle)
	var state string
	for {
		ok, s := c.whole()
		if ok {
			return
		}
		state = s
		if time.Now().After(deadline) {
			t.Fatalf("the Redis topology not whole within %s: %s", chaosRedisSettle, state)
		}
		time.Sleep(50 * time.Millisecond) // between reads of the servers' own reports
	}
}

func (c *chaosRedis) whole() (bool, string) {
	ctx, cancel := context.WithTimeout(c.t.Context(), time.Second)
	defer cancel()
	primary := ""
	for _, s := range c.ss.Servers {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1})
		m, err := sc.Master(ctx, c.ss.Name).Result()
		sc.Close()
		if err != nil {
			return false, fmt.Sprintf("sentinel %s: %v", s.Addr, err)
		}
		addr := net.JoinHostPort(m["ip"], m["port"])
		if m["flags"] != "master" || (primary != "" && addr != primary) {
			return false, fmt.Sprintf("sentinel %s: primary %s flags %q", s.Addr, addr, m["flags"])
		}
		primary = addr
	}
	if c.servers[primary] == nil {
		return false, "sentinels name " + primary + ", not one of the leg's servers"
	}
	pc := goredis.NewClient(&goredis.Options{Addr: primary, MaxRetries: -1})
	defer pc.Close()
	info, err := pc.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		return false, fmt.Sprintf("primary %s: %v\n%s", primary, err, info)
	}
	for a := range c.servers {
		host, port, _ := net.SplitHostPort(a)
		if a != primary && !strings.Contains(info, "ip="+host+",port="+port+",state=online") {
			return false, fmt.Sprintf("primary %s: replica %s not online\n%s", primary, a, info)
		}
	}
	return true, ""
}

// stored reads every client's count from the primary: the fixed window's
// count, field c of the hash under its key.
func (c *chaosRedis) stored() map[string]int64 {
	t := c.t
	pc := goredis.NewClient(&goredis.Options{Addr: c.ss.Primary()})
	defer pc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	keys, err := pc.Keys(ctx, "*}"+leaseKey("*")).Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		_, ip, _ := strings.Cut(k, "}"+leaseKey(""))
		n, err := pc.HGet(ctx, k, "c").Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatalf("HGET %s c: %v", k, err)
		}
		out[ip] = n
	}
	return out
}

// firstServed says how long after at the first 200 arrived.
func (c *chaosRedis) firstServed(at time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.served), func(i int) bool { return !c.served[i].Before(at) })
	if i == len(c.served) {
		return "none yet"
	}
	return c.served[i].Sub(at).Round(time.Millisecond).String()
}

// TestChaosRedis: see the top of this file. With PORCH_BREAK_REPLICA_ACK=1
// the storefronts run with -redis-replicas 0, and the leg must fail.
// PORCH_CHAOS_REDIS_REPLICAS=N runs them with -redis-replicas N.
func TestChaosRedis(t *testing.T) {
	duration := chaosRedisDuration()
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d, duration %s (replay the schedule: ./acceptance.sh -run 'TestChaosRedis$' -timeout 30m -- -seed %d -duration %s)",
		seed, duration, seed, duration)

	// A replica that must resync in full starts at once rather than after
	// the default 5 s of waiting for others to share the transfer.
	args := []string{"--repl-diskless-sync-delay", "0"}
	primary := redistest.StartServer(t, args...)
	r1 := redistest.StartReplica(t, primary, args...)
	r2 := redistest.StartReplica(t, primary, args...)
	c := &chaosRedis{t: t, seen: map[int64]map[int]int{},
		ss:      redistest.StartSentinels(t, "porch", primary, []*redistest.Server{r1, r2}, 3),
		servers: map[string]*redistest.Server{primary.Addr: primary, r1.Addr: r1, r2.Addr: r2}}
	replicas := "2"
	if v := os.Getenv("PORCH_CHAOS_REDIS_REPLICAS"); v != "" {
		replicas = v
	}
	if breakReplicaAck {
		replicas = "0"
	}
	flags := []string{"-redis-sentinel", strings.Join(c.ss.Addrs(), ","), "-redis-master", c.ss.Name, "-redis-replicas", replicas,
		"-trust-proxy", "-rate-limit", fmt.Sprint(chaosLimit), "-rate-window", "1h"}
	flags = append(flags, chaosInflightFlags...)
	for i := range c.inst {
		c.inst[i] = startStorefront(t, newDB(t), flags...)
	}
	c.clients.Store(1)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, srv := range c.ss.Servers {
			t.Logf("sentinel %s:\n%s", srv.Addr, srv.Logs())
		}
		for a, srv := range c.servers {
			t.Logf("redis-server %s (since its last start):\n%s", a, srv.Logs())
		}
	})

	ctx, stop := context.WithCancel(t.Context())
	pace := time.NewTicker(time.Second / chaosRedisOps)
	var wg sync.WaitGroup
	for w := range chaosWorkers {
		r := rand.New(rand.NewPCG(seed, uint64(w)+1))
		wg.Go(func() { c.work(ctx, r, pace.C) })
	}
	r := rand.New(rand.NewPCG(seed, 0))
	faults := map[string]int{}
	start := time.Now()
	// Each kind of fault once per round, in an order drawn from r, so that
	// even a short run sees every kind.
	var round []int
	for time.Since(start) < duration {
		if len(round) == 0 {
			round = r.Perm(faultKinds)
		}
		time.Sleep(time.Duration(300+r.IntN(1200)) * time.Millisecond) // the schedule's pace, not a synchronisation
		at := time.Now()
		f := c.fault(r, round[0])
		round = round[1:]
		faults[f]++
		t.Logf("%s: %s; whole again after %s, first 200 after %s", at.Format("15:04:05.000"), f,
			time.Since(at).Round(time.Millisecond), c.firstServed(at))
	}
	stop()
	wg.Wait()
	pace.Stop()

	// Both instances serve a new client once the topology is whole.
	for i, s := range c.inst {
		ip := chaosRedisIP(c.clients.Add(1) - 1)
		var last reply
		waitFor(t, redisHealWithin, fmt.Sprintf("instance %d serving a new client after the last fault", i), func() bool {
			last = s.try(http.MethodGet, limited, "", "X-Forwarded-For", ip)
			return last.Err == nil && last.Status == http.StatusOK
		})
	}
	stored := c.stored()
	for _, s := range c.inst {
		s.stop(t)
	}

	statuses := map[int]int{}
	over, under, reached := 0, 0, 0
	for client, seen := range c.seen {
		for st, n := range seen {
			statuses[st] += n
		}
		ip := chaosRedisIP(client)
		allowed := seen[http.StatusOK]
		if allowed > chaosLimit {
			over++
			t.Errorf("client %s: served %d, limit %d (%v)", ip, allowed, chaosLimit, seen)
		}
		if got := stored[ip]; got < int64(allowed) {
			under++
			t.Errorf("client %s: Redis holds a count of %d, but %d were served (%v)", ip, got, allowed, seen)
		}
		if allowed+seen[http.StatusServiceUnavailable] >= chaosLimit && seen[http.StatusTooManyRequests] > 0 {
			reached++
		}
	}
	for _, o := range c.odd {
		t.Errorf("unexpected answer: %s", o)
	}
	deepest, spans := c.spans.check(t, chaosInflight)
	t.Logf("in flight: %d served handlers' spans, at most %d of one client at once (-inflight-limit %d)", spans, deepest, chaosInflight)
	names := make([]string, 0, len(faults))
	total := 0
	for f, n := range faults {
		names = append(names, fmt.Sprintf("%s×%d", f, n))
		total += n
	}
	sort.Strings(names)
	t.Logf("chaos seed %d: %d clients (%d reached their limit), %d faults (%s); statuses %v; clients over the limit %d, with a stored count below their 200s %d",
		seed, len(c.seen), reached, total, strings.Join(names, ", "), statuses, over, under)
	if total == 0 {
		t.Errorf("no fault was injected: the leg proved nothing")
	}
	if reached == 0 {
		t.Errorf("no client reached its limit: the leg proved nothing about it")
	}
}
