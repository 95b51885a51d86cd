package redis_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// untilHit retries a hit until the store answers it (a failover's broken
// connections and unready primary fail the first tries), for up to 30s.
func untilHit(t *testing.T, st *redis.Store, key string, rule driver.Rule) driver.Hit {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := addHit(st, key, rule)
		if err == nil {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("hit on %s: still failing: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond) // the client redials, Sentinel answers, on the next try
	}
}

// peekCount reads key's stored count through a store opened on c.
func peekCount(t *testing.T, c goredis.UniversalClient, prefix, key string, rule driver.Rule) int64 {
	t.Helper()
	st := open(t, c, redis.Options{Prefix: prefix})
	ch := make(chan driver.Hit, 1)
	var err error
	if e := st.PeekHit(key, rule, func(h driver.Hit, e error) { err = e; ch <- h }); e != nil {
		t.Fatal(e)
	}
	h := <-ch
	if err != nil {
		t.Fatalf("peek %s: %v", key, err)
	}
	return h.State.Count
}

// With Options.Replicas, a batch is answered only once that many replicas
// hold it: a hit sent while the replica is stopped fails closed (counted
// as a failed commit, logged, and reported by Health), and once the
// replica answers again hits are answered again.
func TestReplicaAckFailsClosedWithoutReplica(t *testing.T) {
	primary := redistest.StartServer(t)
	replica := redistest.StartReplica(t, primary)
	logger, logs := testkit.CaptureLog()
	st := open(t, client(t, primary.Addr), redis.Options{Replicas: 1, Timeout: 2 * time.Second,
		Options: store.Options{Logger: logger}})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	if h, err := addHit(st, "rate:x:p:a", rule); err != nil || !h.Allowed {
		t.Fatalf("hit with the replica up: %+v, %v; want allowed", h, err)
	}
	replica.Pause()
	h, err := addHit(st, "rate:x:p:a", rule)
	if err == nil {
		t.Fatalf("hit with the replica stopped: answered %+v, want an error (no replica holds it)", h)
	}
	if !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Errorf("hit with the replica stopped: error %q, want it to say 0 of 1 replicas acknowledged", err)
	}
	if got := st.Stats().Failed; got < 1 {
		t.Errorf("Stats().Failed = %d, want the failed batch counted", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Health(ctx); !errors.Is(err, store.ErrUnhealthy) || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Errorf("Health with the replica stopped: %v, want store.ErrUnhealthy saying why", err)
	}
	if !strings.Contains(logs.String(), "replicas do not acknowledge") {
		t.Errorf("log: %q, want the failure logged", logs.String())
	}
	replica.Resume()
	if h := untilHit(t, st, "rate:x:p:a", rule); !h.Allowed {
		t.Fatalf("hit once the replica answers again: %+v, want allowed", h)
	}
	if err := st.Health(ctx); err != nil {
		t.Errorf("Health once the replica answers again: %v", err)
	}
}

// A primary whose replica is still in its first sync, as when a primary,
// its replica and the application start together (compose, Kubernetes),
// is a wait, not a misconfiguration: Open opens on it, as the store would
// run on it after a failover. Each hit fails closed saying why, without
// reaching the server, Health says why, and once the sync ends the same
// store counts, with no restart. Through Sentinel alike.
func TestOpenWhileReplicaSyncs(t *testing.T) {
	primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "3600")
	replica := redistest.StartSyncingReplica(t, primary)
	ss := redistest.StartSentinels(t, "porch", primary, nil, 1)
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	logger, logs := testkit.CaptureLog()
	opt := redis.Options{Replicas: 1, Timeout: 2 * time.Second, Options: store.Options{Logger: logger}}
	fc := goredis.NewFailoverClient(ss.FailoverOptions())
	t.Cleanup(func() { fc.Close() })
	stores := []struct {
		name string
		c    goredis.UniversalClient
	}{{"one server", client(t, primary.Addr)}, {"Sentinel", fc}}
	var opened []*redis.Store
	for _, c := range stores {
		st, err := redis.Open(context.Background(), c.c, opt)
		if err != nil {
			t.Fatalf("%s: Open with Replicas 1 while the replica syncs: %v, want it open, failing closed until the sync ends", c.name, err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		opened = append(opened, st)
	}
	for i, st := range opened {
		key := "rate:x:p:" + strconv.Itoa(i)
		h, err := addHit(st, key, rule)
		if err == nil {
			t.Fatalf("%s: hit while the replica syncs: answered %+v, want an error (no replica holds it)", stores[i].name, h)
		}
		if !strings.Contains(err.Error(), "0 online replicas") {
			t.Errorf("%s: hit while the replica syncs: %v, want it to name 0 online replicas", stores[i].name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = st.Health(ctx)
		cancel()
		if !errors.Is(err, store.ErrUnhealthy) || !strings.Contains(err.Error(), "0 online replicas") {
			t.Errorf("%s: Health while the replica syncs: %v, want store.ErrUnhealthy naming 0 online replicas", stores[i].name, err)
		}
	}
	if !strings.Contains(logs.String(), "every batch fails closed until it may") {
		t.Errorf("log: %q, want the shortfall logged", logs.String())
	}
	// The hits refused were judged before they were sent: none counted.
	for i := range opened {
		key := "rate:x:p:" + strconv.Itoa(i)
		if n := peekCount(t, client(t, primary.Addr), redis.DefaultPrefix, key, rule); n != 0 {
			t.Errorf("%s: count on the primary after the refused hit: %d, want 0 (not sent)", stores[i].name, n)
		}
	}

	redistest.FinishSync(t, primary, replica)
	for i, st := range opened {
		key := "rate:x:p:" + strconv.Itoa(i)
		if h := untilHit(t, st, key, rule); !h.Allowed {
			t.Errorf("%s: first hit once the replica is online: %+v, want allowed", stores[i].name, h)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := st.Health(ctx); err != nil {
			t.Errorf("%s: Health once the replica is online: %v", stores[i].name, err)
		}
		cancel()
	}
	if !strings.Contains(logs.String(), "meets the store's options again") {
		t.Errorf("log: %q, want the recovery logged", logs.String())
	}
}

// While a replica syncs, Open still refuses what waiting cannot mend:
// RequireDurable on a primary with appendonly no, a master name no
// Sentinel monitors, and a negative Replicas.
func TestOpenWhileReplicaSyncsRefusesMisconfiguration(t *testing.T) {
	primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "3600")
	redistest.StartSyncingReplica(t, primary)
	ss := redistest.StartSentinels(t, "porch", primary, nil, 1)
	_, err := redis.Open(context.Background(), client(t, primary.Addr), redis.Options{Replicas: 1, RequireDurable: true})
	if !errors.Is(err, redis.ErrNotDurable) {
		t.Errorf("Open with Replicas 1 and RequireDurable on appendonly no: %v, want ErrNotDurable", err)
	}
	opt := ss.FailoverOptions()
	opt.MasterName = "not-porch"
	fc := goredis.NewFailoverClient(opt)
	t.Cleanup(func() { fc.Close() })
	if _, err := redis.Open(context.Background(), fc, redis.Options{Replicas: 1}); err == nil {
		t.Errorf("Open through Sentinels that monitor no %q: opened, want an error", opt.MasterName)
	}
	_, err = redis.Open(context.Background(), client(t, primary.Addr), redis.Options{Replicas: -1})
	if err == nil || !strings.Contains(err.Error(), "Replicas") {
		t.Errorf("Open with Replicas -1: %v, want an error naming Replicas", err)
	}
}

// Open warns when Replicas is below the primary's online replicas: WAIT
// counts any of them, and a failover that promotes one that did not
// acknowledge forgets answered hits. With Replicas equal to every replica
// it says nothing.
func TestOpenWarnsWhenReplicasBelowEveryReplica(t *testing.T) {
	primary := redistest.StartServer(t)
	redistest.StartReplica(t, primary)
	redistest.StartReplica(t, primary)
	for _, tt := range []struct {
		replicas int
		warns    bool
	}{{1, true}, {2, false}} {
		var buf bytes.Buffer
		st, err := redis.Open(context.Background(), client(t, primary.Addr), redis.Options{Replicas: tt.replicas,
			Options: store.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))}})
		if err != nil {
			t.Fatalf("Open with Replicas %d: %v", tt.replicas, err)
		}
		st.Close(context.Background())
		if got := strings.Contains(buf.String(), "below the primary's online replicas"); got != tt.warns {
			t.Errorf("Replicas %d of 2: warned %v, want %v (log: %s)", tt.replicas, got, tt.warns, buf.String())
		}
	}
}

// A hit answered allowed survives the loss of the primary when a replica
// acknowledged it: the replica's link is cut (the most a lagging replica
// can miss: everything after it), the primary is killed, the replica is
// promoted, and its count must be at least what was answered allowed.
// Without the acknowledgement the same sequence loses answered hits, which
// the test checks too, to show that it can tell.
func TestReplicaAckKeepsAnsweredHitsThroughPromotion(t *testing.T) {
	for _, tt := range []struct {
		replicas int
		loses    bool // answered hits are missing on the promoted replica
	}{
		{replicas: 0, loses: true},
		{replicas: 1, loses: false},
	} {
		t.Run("replicas="+strconv.Itoa(tt.replicas), func(t *testing.T) {
			primary := redistest.StartServer(t)
			replica := redistest.StartReplica(t, primary)
			// The servers are the test's own: no prefix to clean up.
			const prefix = redis.DefaultPrefix
			st, err := redis.Open(context.Background(), client(t, primary.Addr), redis.Options{Replicas: tt.replicas,
				Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
			const key = "rate:x:p:alice"
			var allowed int64
			hit := func() {
				if h, err := addHit(st, key, rule); err == nil && h.Allowed {
					allowed++
				}
			}
			for range 3 {
				hit()
			}
			// The replica has what the primary acknowledged so far; then it
			// is cut off (it follows a server that is not there), and the
			// next hits reach the primary alone.
			waitCaughtUp(t, primary.Addr, replica.Addr)
			rc := client(t, replica.Addr)
			if err := rc.Do(context.Background(), "replicaof", "127.0.0.1", "1").Err(); err != nil {
				t.Fatalf("cut the replica off: %v", err)
			}
			for range 2 {
				hit()
			}
			primary.Kill9()
			st.Close(context.Background())
			if err := rc.Do(context.Background(), "replicaof", "no", "one").Err(); err != nil {
				t.Fatalf("promote the replica: %v", err)
			}
			stored := peekCount(t, rc, prefix, key, rule)
			t.Logf("answered allowed %d, stored on the promoted replica %d", allowed, stored)
			if lost := stored < allowed; lost != tt.loses {
				t.Errorf("Replicas %d: answered allowed %d, the promoted replica holds %d; want lost=%v", tt.replicas, allowed, stored, tt.loses)
			}
		})
	}
}

// waitCaughtUp waits until the replica has applied everything the primary
// has written.
func waitCaughtUp(t *testing.T, primary, replica string) {
	t.Helper()
	pc, rc := client(t, primary), client(t, replica)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := pc.Info(context.Background(), "replication").Result()
		r, _ := rc.Info(context.Background(), "replication").Result()
		po, ro := field(p, "master_repl_offset"), field(r, "master_repl_offset")
		if po != "" && po == ro {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s at offset %s, primary at %s", replica, ro, po)
		}
		time.Sleep(10 * time.Millisecond) // polling the servers' offsets
	}
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Through Sentinel, with Replicas 1: the primary is killed with SIGKILL,
// Sentinel promotes a replica, and the same store, without a restart,
// counts on the new primary (its scripts loaded there): a client limited
// before is still limited, and a new client is allowed exactly its limit.
func TestSentinelFailoverKeepsLimits(t *testing.T) {
	primary := redistest.StartServer(t)
	r1 := redistest.StartReplica(t, primary)
	r2 := redistest.StartReplica(t, primary)
	sentinels := redistest.StartSentinels(t, "porch", primary, []*redistest.Server{r1, r2}, 3)
	opt := sentinels.FailoverOptions()
	opt.ContextTimeoutEnabled = true
	fc := goredis.NewFailoverClient(opt)
	t.Cleanup(func() { fc.Close() })
	logger, logs := testkit.CaptureLog()
	st := open(t, fc, redis.Options{Replicas: 1, Options: store.Options{Logger: logger}})
	const limit = 5
	rule := algorithm.MustRule(algorithm.Fixed, limit, time.Hour, 0)
	for i := range limit {
		if h, err := addHit(st, "rate:x:p:alice", rule); err != nil || !h.Allowed {
			t.Fatalf("alice's hit %d before the failover: %+v, %v; want allowed", i+1, h, err)
		}
	}
	old := sentinels.Primary()
	primary.Kill9()
	killed := time.Now()
	now := sentinels.WaitNewPrimary(old)
	if h := untilHit(t, st, "rate:x:p:alice", rule); h.Allowed {
		t.Fatalf("alice after the failover to %s: allowed %+v; her count was lost", now, h)
	}
	t.Logf("primary %s killed; %s promoted; first answer %s after the kill", old, now, time.Since(killed).Round(time.Millisecond))
	var allowed int
	for range limit + 3 {
		if untilHit(t, st, "rate:x:p:bob", rule).Allowed {
			allowed++
		}
	}
	if allowed != limit {
		t.Errorf("bob after the failover: %d allowed, want exactly %d", allowed, limit)
	}
	if !strings.Contains(logs.String(), "a new primary") {
		t.Errorf("log: %q, want the new primary logged", logs.String())
	}
}

// A primary Sentinel promotes that cannot make a count durable fails every
// batch closed under RequireDurable, saying why (the hit's error, Health,
// the log), until it is configured to; Open's check alone would let it
// answer hits a restart forgets.
func TestNewPrimaryNotDurableFailsClosed(t *testing.T) {
	primary := redistest.StartDurableServer(t)
	replica := redistest.StartReplica(t, primary) // appendonly no
	sentinels := redistest.StartSentinels(t, "porch", primary, []*redistest.Server{replica}, 1)
	opt := sentinels.FailoverOptions()
	opt.ContextTimeoutEnabled = true
	fc := goredis.NewFailoverClient(opt)
	t.Cleanup(func() { fc.Close() })
	logger, logs := testkit.CaptureLog()
	st := open(t, fc, redis.Options{RequireDurable: true, Options: store.Options{Logger: logger}})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	if _, err := addHit(st, "rate:x:p:a", rule); err != nil {
		t.Fatalf("hit on the durable primary: %v", err)
	}
	old := sentinels.Primary()
	sentinels.Failover()
	now := sentinels.WaitNewPrimary(old)
	// Until the old primary is demoted, it still counts, durably, for a
	// client that has not heard of the switch.
	redistest.WaitReplicaOf(t, old, now)
	// The first hits may meet the switch's broken connections; none may be
	// answered, and then they fail naming the setting.
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for {
		var h driver.Hit
		h, err = addHit(st, "rate:x:p:a", rule)
		if err == nil {
			t.Fatalf("hit after the failover to a primary with appendonly no: answered %+v, want ErrNotDurable", h)
		}
		if errors.Is(err, redis.ErrNotDurable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hits after the failover: %v, want ErrNotDurable", err)
		}
		time.Sleep(20 * time.Millisecond) // until the store meets the new primary
	}
	if !strings.Contains(err.Error(), "appendonly=no") {
		t.Errorf("error %q, want it to name appendonly=no", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Health(ctx); !errors.Is(err, store.ErrUnhealthy) || !errors.Is(err, redis.ErrNotDurable) {
		t.Errorf("Health on the promoted primary: %v, want store.ErrUnhealthy wrapping ErrNotDurable", err)
	}
	if !strings.Contains(logs.String(), "may not count") {
		t.Errorf("log: %q, want the refusal logged", logs.String())
	}
	nc := client(t, replica.Addr)
	if err := nc.ConfigSet(context.Background(), "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := nc.ConfigSet(context.Background(), "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	untilHit(t, st, "rate:x:p:a", rule)
	if err := st.Health(ctx); err != nil {
		t.Errorf("Health once the new primary is durable: %v", err)
	}
}

// On a cluster, each node's share of a batch waits for that node's own
// replicas: with the replica of one key's master stopped, a hit on that
// key fails closed, naming the master, while a hit on a key of another
// master is answered.
func TestReplicaAckPerClusterNode(t *testing.T) {
	nodes := redistest.StartClusterServers(t, 3, 1)
	byAddr := make(map[string]*redistest.Server)
	var addrs []string
	for _, n := range nodes {
		byAddr[n.Addr] = n
		addrs = append(addrs, n.Addr)
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	st := open(t, cc, redis.Options{Replicas: 1, Timeout: 2 * time.Second})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	ctx := context.Background()
	// Two keys whose counters live on different masters.
	var keys []string
	var masters []*goredis.Client
	for i := 0; len(keys) < 2; i++ {
		key := "rate:x:p:" + strings.Repeat("k", i+1)
		m, err := cc.MasterForKey(ctx, st.CounterKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(masters) == 0 || masters[0].Options().Addr != m.Options().Addr {
			keys, masters = append(keys, key), append(masters, m)
		}
	}
	for _, key := range keys {
		if h, err := addHit(st, key, rule); err != nil || !h.Allowed {
			t.Fatalf("hit on %s with every replica up: %+v, %v; want allowed", key, h, err)
		}
	}
	info, err := masters[0].Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	repl, _, _ := strings.Cut(field(info, "slave0"), ",state")
	host, port := "", ""
	for _, kv := range strings.Split(repl, ",") {
		if v, ok := strings.CutPrefix(kv, "ip="); ok {
			host = v
		}
		if v, ok := strings.CutPrefix(kv, "port="); ok {
			port = v
		}
	}
	replica := byAddr[host+":"+port]
	if replica == nil {
		t.Fatalf("no started server is the replica of %s: %q", masters[0].Options().Addr, info)
	}
	replica.Pause()
	if h, err := addHit(st, keys[0], rule); err == nil || !strings.Contains(err.Error(), masters[0].Options().Addr) ||
		!strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Errorf("hit on %s with its master's replica stopped: %+v, %v; want an error naming %s and the missing acknowledgement",
			keys[0], h, err, masters[0].Options().Addr)
	}
	if h := untilHit(t, st, keys[1], rule); !h.Allowed {
		t.Errorf("hit on %s, on another master, meanwhile: %+v, want allowed", keys[1], h)
	}
	replica.Resume()
	if h := untilHit(t, st, keys[0], rule); !h.Allowed {
		t.Errorf("hit on %s once the replica answers again: %+v, want allowed", keys[0], h)
	}
}

// A client that reaches another server on its next connection, as a
// failover client does once Sentinel names a new primary, has it judged
// before any batch it carried is answered, even when no batch failed on
// the way: the old server closed the connections, the client dropped them
// unused, and dialled the new one.
func TestNewPrimaryJudgedBeforeItAnswers(t *testing.T) {
	durable := redistest.StartDurableServer(t)
	forgetful := redistest.StartServer(t) // appendonly no
	var target atomic.Value
	target.Store(durable.Addr)
	c := goredis.NewClient(&goredis.Options{Addr: "primary", Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, target.Load().(string))
	}})
	t.Cleanup(func() { c.Close() })
	st := open(t, c, redis.Options{RequireDurable: true})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	if _, err := addHit(st, "rate:x:p:a", rule); err != nil {
		t.Fatalf("hit on the durable server: %v", err)
	}
	target.Store(forgetful.Addr)
	if err := client(t, durable.Addr).ClientKillByFilter(context.Background(), "type", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		h, err := addHit(st, "rate:x:p:a", rule)
		if err == nil {
			t.Fatalf("hit after the switch to a server with appendonly no: answered %+v, want ErrNotDurable", h)
		}
		if errors.Is(err, redis.ErrNotDurable) {
			return
		}
		t.Logf("hit during the switch: %v", err) // a connection the client had not yet dropped
	}
	t.Fatal("hits after the switch fail, but none with ErrNotDurable")
}

// Open says why a Sentinel setup cannot be reached, rather than that a
// budget ran out: here the address given as a Sentinel is a plain server,
// and the error must carry the server's own answer.
func TestOpenSaysWhyTheSentinelsFailed(t *testing.T) {
	srv := redistest.StartServer(t)
	fc := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "porch", SentinelAddrs: []string{srv.Addr}})
	t.Cleanup(func() { fc.Close() })
	_, err := redis.Open(context.Background(), fc, redis.Options{})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "sentinel") {
		t.Errorf("Open through a 'Sentinel' that is a plain server: %v, want the server's answer naming the sentinel command", err)
	}
}

// A primary with fewer replicas online than Options.Replicas is judged
// before a batch is sent, so no WAIT ever times out: the log says too few
// replicas are online, not that they do not acknowledge in time (which
// TestReplicaAckFailsClosedWithoutReplica's stopped replica earns), so
// that an operator looks at the replication links, not at replica lag.
func TestTooFewReplicasOnlineIsLoggedAsSuch(t *testing.T) {
	primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "3600")
	redistest.StartSyncingReplica(t, primary)
	logger, logs := testkit.CaptureLog()
	st := open(t, client(t, primary.Addr), redis.Options{Replicas: 1, Timeout: 2 * time.Second,
		Options: store.Options{Logger: logger}})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	if h, err := addHit(st, "rate:x:p:a", rule); err == nil {
		t.Fatalf("hit while the replica syncs: answered %+v, want an error (no replica holds it)", h)
	}
	if got := logs.String(); !strings.Contains(got, "too few replicas online") || strings.Contains(got, "do not acknowledge") {
		t.Errorf("log: %q, want it to say too few replicas are online, and not that they do not acknowledge", got)
	}
}
