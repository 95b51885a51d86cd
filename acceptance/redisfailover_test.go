//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
)

// The Redis failover legs: a Sentinel-managed primary with two replicas,
// and a Cluster with a replica per primary, each shared by two storefronts
// started with -redis-replicas 1; the primary that holds a limited
// client's counter is killed with SIGKILL and a replica takes over. The
// storefronts must heal on their own within seconds, and the answered hits
// must survive: the limited client stays limited, and a new client's burst
// over both instances is served exactly its limit.
//
// With PORCH_BREAK_REPLICA_ACK=1 the legs (and TestChaosRedis) break the
// guarantee on purpose, to show that they catch its loss: the storefronts
// run with -redis-replicas 0 and the replicas are cut off from the primary
// while the client's hits are answered, so the replica promoted has never
// seen them. The legs must then fail.
var breakReplicaAck = os.Getenv("PORCH_BREAK_REPLICA_ACK") == "1"

// redisFailoverLimit is the limited clients' limit in the failover legs.
const redisFailoverLimit = 20

// redisHealWithin bounds kill → first 200: Sentinel's down-after (1 s) or the
// Cluster's node timeout, the vote, the promotion, the replicas following
// the new primary, and the storefronts finding it, on a loaded machine.
const redisHealWithin = 30 * time.Second

// replicaFlags are the storefront's -redis-replicas and limiter flags for
// the failover legs.
func replicaFlags() []string {
	n := "1"
	if breakReplicaAck {
		n = "0"
	}
	return []string{"-redis-replicas", n, "-trust-proxy", "-rate-limit", strconv.Itoa(redisFailoverLimit), "-rate-window", "1h"}
}

// cutReplication stops replicas from following primary while primary keeps
// answering: each replica is given a password the primary does not have,
// then the primary drops its replica links, so every reconnection fails at
// AUTH. A write the primary acknowledges meanwhile is on no replica (unlike
// a SIGSTOPped replica, which would still read it from its socket once
// continued). rejoinReplication undoes it.
func cutReplication(t *testing.T, primary string, replicas ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, r := range replicas {
		c := goredis.NewClient(&goredis.Options{Addr: r})
		err := c.ConfigSet(ctx, "masterauth", "not-the-primarys").Err()
		c.Close()
		if err != nil {
			t.Fatalf("CONFIG SET masterauth on replica %s: %v", r, err)
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: primary})
	defer c.Close()
	if err := c.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica on %s: %v", primary, err)
	}
	waitFor(t, healthTimeout, "the primary without replicas", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0\r")
	})
	t.Logf("replication from %s to %v cut: hits answered now are on the primary alone", primary, replicas)
}

// rejoinReplication lets replicas cut by cutReplication follow a primary
// again (a live one, or the one promoted after a kill).
func rejoinReplication(t *testing.T, replicas ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, r := range replicas {
		c := goredis.NewClient(&goredis.Options{Addr: r})
		err := c.ConfigSet(ctx, "masterauth", "").Err()
		c.Close()
		if err != nil {
			t.Errorf("CONFIG SET masterauth '' on %s: %v", r, err)
		}
	}
}

// limitClient sends ip's whole limit over instances in turn, each answered
// 200, then one more to each instance, answered 429.
func limitClient(t *testing.T, ip string, instances ...*storefront) {
	t.Helper()
	for i := range redisFailoverLimit {
		if r := instances[i%len(instances)].get(t, limited, "X-Forwarded-For", ip); r.Status != http.StatusOK {
			t.Fatalf("client %s, request %d of its limit %d: got %s, want 200", ip, i+1, redisFailoverLimit, r)
		}
	}
	for _, s := range instances {
		if r := s.get(t, limited, "X-Forwarded-For", ip); r.Status != http.StatusTooManyRequests {
			t.Fatalf("client %s past its limit: got %s, want 429", ip, r)
		}
	}
}

// watchHeal starts one prober per instance, from now: each sends GET
// limited from a fresh client address (next()) every readyPoll until one
// is answered 200, and fails the test on any answer but 200 or 503 with
// Retry-After. The returned function waits for them and returns each
// instance's time from since to its first 200.
func watchHeal(t *testing.T, since time.Time, next func() string, instances ...*storefront) func() []time.Duration {
	t.Helper()
	heal := make([]time.Duration, len(instances))
	failed := make([]string, len(instances))
	var wg sync.WaitGroup
	for i, s := range instances {
		wg.Go(func() {
			deadline := time.Now().Add(redisHealWithin)
			unavailable := 0
			for {
				r := s.try(http.MethodGet, limited, "", "X-Forwarded-For", next())
				switch {
				case r.Err == nil && r.Status == http.StatusOK:
					heal[i] = time.Since(since)
					return
				case r.Err == nil && r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "":
					unavailable++
				default:
					failed[i] = fmt.Sprintf("instance %d while the primary was replaced: got %s, want 200 or 503 with Retry-After", i, r)
					return
				}
				if time.Now().After(deadline) {
					failed[i] = fmt.Sprintf("instance %d: no 200 within %s of the kill (%d answered 503)\n%s", i, redisHealWithin, unavailable, s.output())
					return
				}
				time.Sleep(readyPoll) // the probes' pace: each is a fresh client
			}
		})
	}
	return func() []time.Duration {
		t.Helper()
		wg.Wait()
		for _, f := range failed {
			if f != "" {
				t.Fatal(f)
			}
		}
		return heal
	}
}

// burstExact sends 3 × redisFailoverLimit parallel requests from ip over
// instances and fails unless exactly redisFailoverLimit are served and the
// rest are 429.
func burstExact(t *testing.T, ip string, instances ...*storefront) {
	t.Helper()
	const burst = 3 * redisFailoverLimit
	for _, s := range instances {
		s.warm(t, burst/len(instances))
	}
	rs := parallel(burst, func(i int) reply {
		return instances[i%len(instances)].try(http.MethodGet, limited, "", "X-Forwarded-For", ip)
	})
	if got := statuses(rs); got[http.StatusOK] != redisFailoverLimit || got[http.StatusTooManyRequests] != burst-redisFailoverLimit || len(got) != 2 {
		t.Errorf("new client %s after the failover: %d parallel requests over %d instances, limit %d: got %v, want %d×200 and %d×429",
			ip, burst, len(instances), redisFailoverLimit, got, redisFailoverLimit, burst-redisFailoverLimit)
	}
}

// stillLimited fails unless every instance answers ip 429.
func stillLimited(t *testing.T, ip string, instances ...*storefront) {
	t.Helper()
	for i, s := range instances {
		if r := s.get(t, limited, "X-Forwarded-For", ip); r.Status != http.StatusTooManyRequests {
			t.Errorf("client %s, limited before the primary was killed: instance %d answered %s after the failover, want 429 (its answered hits were lost)", ip, i, r)
		}
	}
}

// probeAddrs returns a function that yields a fresh client address on
// each call, under prefix (three octets' worth of room).
func probeAddrs(prefix string) func() string {
	var n atomic.Int64
	return func() string {
		i := n.Add(1)
		return fmt.Sprintf("%s.%d.%d", prefix, i/256%256, i%256)
	}
}

// Sentinel failover: a primary with two replicas and three Sentinels, two
// storefronts with -redis-sentinel and -redis-replicas 1. SIGKILL of the
// primary: each instance serves again within seconds, without a restart;
// the client limited before stays limited on both; a new client's
// parallel burst over both is served exactly its limit.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t)
	r1 := redistest.StartReplica(t, primary)
	r2 := redistest.StartReplica(t, primary)
	ss := redistest.StartSentinels(t, "porch", primary, []*redistest.Server{r1, r2}, 3)
	flags := append([]string{"-redis-sentinel", strings.Join(ss.Addrs(), ","), "-redis-master", ss.Name}, replicaFlags()...)
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)

	limitedIP := clientIP(0)
	if breakReplicaAck {
		cutReplication(t, primary.Addr, r1.Addr, r2.Addr)
	}
	limitClient(t, limitedIP, a, b)

	kill := time.Now()
	primary.Kill9()
	if breakReplicaAck {
		rejoinReplication(t, r1.Addr, r2.Addr)
	}
	healed := watchHeal(t, kill, probeAddrs("10.91"), a, b)
	promoted := ss.WaitNewPrimary(primary.Addr)
	failover := time.Since(kill)
	heal := healed()
	t.Logf("SIGKILL of the Sentinel primary %s: %s promoted within %s of the kill (polling the Sentinels); first 200 on instance a %s, on instance b %s after the kill",
		primary.Addr, promoted, failover.Round(time.Millisecond), heal[0].Round(time.Millisecond), heal[1].Round(time.Millisecond))

	stillLimited(t, limitedIP, a, b)
	burstExact(t, clientIP(1), a, b)
	a.stop(t)
	b.stop(t)
}

// clusterKey is the Redis key the storefront's general limiter counts ip
// under on a Cluster: the default prefix, the hash tag (the FNV-1a digest
// of the key's principal part, "ip:<address>") and the key itself, as
// porch/store/redis's counterKey makes it. The leg checks it against the
// key it finds, so a change of format fails here rather than silently
// probing the wrong node.
func clusterKey(ip string) string {
	h := fnv.New64a()
	h.Write([]byte("ip:" + ip))
	return fmt.Sprintf("porch:{%016x}%s", h.Sum64(), leaseKey(ip))
}

// clusterShard is one primary of a cluster, its replica, and the slots it
// serves.
type clusterShard struct {
	primary, replica *redistest.Server
	slots            [][2]int64
}

func (s clusterShard) holds(slot int64) bool {
	for _, r := range s.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// shardOf returns the shard of nodes that serves key's slot (CLUSTER
// KEYSLOT and CLUSTER SLOTS, asked of seed).
func shardOf(t *testing.T, seed *goredis.Client, nodes []*redistest.Server, key string) clusterShard {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	slot, err := seed.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	ranges, err := seed.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	byAddr := map[string]*redistest.Server{}
	for _, n := range nodes {
		byAddr[n.Addr] = n
	}
	var sh clusterShard
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			sh.primary = byAddr[r.Nodes[0].Addr]
		}
	}
	if sh.primary == nil {
		t.Fatalf("slot %d of %s: no primary among the cluster's nodes in %+v", slot, key, ranges)
	}
	for _, r := range ranges {
		if r.Nodes[0].Addr == sh.primary.Addr {
			sh.slots = append(sh.slots, [2]int64{int64(r.Start), int64(r.End)})
		}
	}
	// Its replica from its own INFO: another node's CLUSTER SLOTS may not
	// list the replica until gossip has reached it.
	pc := goredis.NewClient(&goredis.Options{Addr: sh.primary.Addr})
	defer pc.Close()
	info, err := pc.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication of %s: %v", sh.primary.Addr, err)
	}
	for _, n := range nodes {
		host, port, _ := strings.Cut(n.Addr, ":")
		if strings.Contains(info, "ip="+host+",port="+port+",state=online") {
			sh.replica = n
		}
	}
	if sh.replica == nil {
		t.Fatalf("primary %s of slot %d: no online replica among the cluster's nodes\n%s", sh.primary.Addr, slot, info)
	}
	return sh
}

// Cluster failover: three primaries with a replica each (node timeout 1 s),
// two storefronts with -redis-cluster and -redis-replicas 1. SIGKILL of the
// primary holding a limited client's counter: its replica takes over; with
// no replica left to acknowledge, that shard fails closed until the killed
// node, restarted, rejoins as the new primary's replica (the price of one
// replica per shard, see docs/deploying.md); then the client is still
// limited on both instances and a new client of the same shard is served
// exactly its limit.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartClusterServers(t, 3, 1, "--cluster-node-timeout", "1000")
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	flags := append([]string{"-redis-cluster", strings.Join(addrs, ",")}, replicaFlags()...)
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)

	seed := goredis.NewClient(&goredis.Options{Addr: nodes[0].Addr})
	defer seed.Close()
	limitedIP := clientIP(0)
	sh := shardOf(t, seed, nodes, clusterKey(limitedIP))
	if breakReplicaAck {
		cutReplication(t, sh.primary.Addr, sh.replica.Addr)
	}
	limitClient(t, limitedIP, a, b)
	pc := goredis.NewClient(&goredis.Options{Addr: sh.primary.Addr})
	keys, err := pc.Keys(t.Context(), "*"+leaseKey(limitedIP)).Result()
	pc.Close()
	if err != nil || len(keys) != 1 || keys[0] != clusterKey(limitedIP) {
		t.Fatalf("the limited client's counter on %s: got keys %v (%v), want [%s]", sh.primary.Addr, keys, err, clusterKey(limitedIP))
	}

	// Probes from addresses whose counters fall on the killed shard: one
	// on another shard would be served throughout and measure nothing.
	var probes []string
	next := probeAddrs("10.92")
	for len(probes) < 1000 {
		ip := next()
		slot, err := seed.ClusterKeySlot(t.Context(), clusterKey(ip)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if sh.holds(slot) {
			probes = append(probes, ip)
		}
	}
	fresh, probes := probes[0], probes[1:] // the burst's client, never a probe
	var probe atomic.Int64
	nextProbe := func() string { return probes[(probe.Add(1)-1)%int64(len(probes))] }

	kill := time.Now()
	sh.primary.Kill9()
	healed := watchHeal(t, kill, nextProbe, a, b)
	rc := goredis.NewClient(&goredis.Options{Addr: sh.replica.Addr})
	defer rc.Close()
	waitFor(t, redisHealWithin, "the replica "+sh.replica.Addr+" promoted", func() bool {
		info, err := rc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	promoted := time.Since(kill)
	if breakReplicaAck {
		rejoinReplication(t, sh.replica.Addr)
	}
	// Restarted only now: a node back before its replica's promotion
	// would resume as the shard's primary, empty (no persistence here).
	sh.primary.Restart()
	redistest.WaitReplicaOf(t, sh.primary.Addr, sh.replica.Addr)
	rejoined := time.Since(kill)
	heal := healed()
	t.Logf("SIGKILL of the cluster primary %s: replica %s promoted %s after the kill, the killed node back as its replica %s after; first 200 on the shard: instance a %s, instance b %s after the kill",
		sh.primary.Addr, sh.replica.Addr, promoted.Round(time.Millisecond), rejoined.Round(time.Millisecond),
		heal[0].Round(time.Millisecond), heal[1].Round(time.Millisecond))

	stillLimited(t, limitedIP, a, b)
	burstExact(t, fresh, a, b)
	a.stop(t)
	b.stop(t)
}

// A storefront started with -redis-replicas 1 while its primary's replica
// is still in its first sync, as compose or Kubernetes start a primary, a
// replica and the application together (Redis 7 holds a first sync back
// for repl-diskless-sync-delay, 5 s by default; here until the leg lets
// it go), starts rather than exiting: it answers limited requests 503
// with Retry-After and /healthz 503 saying Redis cannot count, logs the
// shortfall, and serves 200 once the sync ends, without a restart.
func TestRedisStartsWhileReplicaSyncs(t *testing.T) {
	t.Parallel()
	primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "3600")
	replica := redistest.StartSyncingReplica(t, primary)
	s, _ := launchStorefront(t, newDB(t), "-redis", "redis://"+primary.Addr+"/0", "-redis-replicas", "1",
		"-rate-limit", "100", "-rate-window", "1h")

	r := s.get(t, limited)
	checkProblem(t, r, http.StatusServiceUnavailable)
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("GET %s while the replica syncs: no Retry-After (%s)", limited, r)
	}
	h := s.get(t, "/healthz")
	checkProblem(t, h, http.StatusServiceUnavailable)
	if !strings.Contains(string(h.Body), "Redis cannot count") || h.Header.Get("Retry-After") == "" {
		t.Errorf("GET /healthz while the replica syncs: %s (Retry-After %q), want 503 with Retry-After saying Redis cannot count",
			h, h.Header.Get("Retry-After"))
	}
	waitFor(t, healthTimeout, "the log naming the replicas not online", func() bool {
		return strings.Contains(s.stderr.String(), "0 online replicas")
	})

	redistest.FinishSync(t, primary, replica)
	waitFor(t, healthTimeout, "GET /healthz 200 once the replica is online", func() bool {
		return s.get(t, "/healthz").Status == http.StatusOK
	})
	if r := s.get(t, limited); r.Status != http.StatusOK {
		t.Errorf("GET %s once the replica is online: got %s, want 200", limited, r)
	}
	s.stop(t)
}
