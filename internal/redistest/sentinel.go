package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sentinel timing: short, so that a test's failover takes seconds. A
// primary that has not answered for SentinelDownAfter is down; a failover
// that has not finished within failoverTimeout is tried again.
const (
	SentinelDownAfter = time.Second
	failoverTimeout   = 3 * time.Second
	// failoverWait bounds how long WaitNewPrimary waits: a primary's
	// SentinelDownAfter, the vote and the promotion, with room for a
	// loaded machine.
	failoverWait = 30 * time.Second
)

// StartReplica runs a redis-server that replicates primary (args as for
// StartServer) and waits until primary counts it as an online replica, so
// that a write primary acknowledges after this returns reaches it.
func StartReplica(tb testing.TB, primary *Server, args ...string) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr)
	r := StartServer(tb, append([]string{"--replicaof", host, port}, args...)...)
	WaitReplicas(tb, primary.Addr, r.Addr)
	return r
}

// StartSyncingReplica runs a redis-server that replicates primary (args
// as for StartServer) and waits until primary counts it as a replica still
// in its first sync: connected, and not online. primary must have been
// started with a repl-diskless-sync-delay longer than the test
// ("--repl-diskless-sync-delay", "3600"): Redis holds a diskless first
// sync back that long, waiting for more replicas to share it (5 s by
// default). FinishSync lets it start.
func StartSyncingReplica(tb testing.TB, primary *Server, args ...string) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr)
	r := StartServer(tb, append([]string{"--replicaof", host, port}, args...)...)
	waitReplicaState(tb, primary.Addr, "wait_bgsave", r.Addr)
	return r
}

// FinishSync lets primary start the first syncs it holds back for
// repl-diskless-sync-delay (CONFIG SET repl-diskless-sync-delay 0) and
// waits until it reports each of replicas online.
func FinishSync(tb testing.TB, primary *Server, replicas ...*Server) {
	tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: primary.Addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		tb.Fatalf("redistest: CONFIG SET repl-diskless-sync-delay 0 on %s: %v", primary.Addr, err)
	}
	addrs := make([]string, len(replicas))
	for i, r := range replicas {
		addrs[i] = r.Addr
	}
	WaitReplicas(tb, primary.Addr, addrs...)
}

// WaitReplicas waits until the server at primary reports each of replicas
// (addresses) online in INFO replication, or fails tb.
func WaitReplicas(tb testing.TB, primary string, replicas ...string) {
	tb.Helper()
	waitReplicaState(tb, primary, "online", replicas...)
}

// waitReplicaState waits until the server at primary reports each of
// replicas (addresses) in state (INFO replication's state=), or fails tb.
func waitReplicaState(tb testing.TB, primary, state string, replicas ...string) {
	tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: primary, MaxRetries: -1})
	defer c.Close()
	var info string
	err := poll(readyTimeout, func(ctx context.Context) (bool, error) {
		var err error
		info, err = c.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		for _, r := range replicas {
			host, port, _ := net.SplitHostPort(r)
			if !strings.Contains(info, "ip="+host+",port="+port+",state="+state+",") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		tb.Fatalf("redistest: replicas %v of %s not %s: %v\n%s", replicas, primary, state, err, info)
	}
}

// WaitReplicaOf waits until the server at addr reports itself a replica
// of primary whose link is up (as a demoted primary does once Sentinel
// has reconfigured it), or fails tb.
func WaitReplicaOf(tb testing.TB, addr, primary string) {
	tb.Helper()
	host, port, _ := net.SplitHostPort(primary)
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var info string
	err := poll(failoverWait, func(ctx context.Context) (bool, error) {
		var err error
		info, err = c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_host:"+host+"\r") &&
			strings.Contains(info, "master_port:"+port+"\r") && strings.Contains(info, "master_link_status:up"), err
	})
	if err != nil {
		tb.Fatalf("redistest: %s not a replica of %s: %v\n%s", addr, primary, err, info)
	}
}

// Sentinels are redis-server --sentinel processes this package started,
// all monitoring one primary under Name.
type Sentinels struct {
	tb      testing.TB
	Name    string
	Servers []*Server
}

// Addrs are the Sentinels' addresses, as a failover client takes them.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		addrs[i] = srv.Addr
	}
	return addrs
}

// StartSentinels runs n Sentinels (quorum n/2+1) that monitor primary
// under name, with SentinelDownAfter, and waits until each of them has a
// working link to every one of replicas (which have been started with
// StartReplica) and knows every other Sentinel, and can authorize a
// failover, so that a primary killed after this returns is replaced. They are killed when tb ends.
func StartSentinels(tb testing.TB, name string, primary *Server, replicas []*Server, n int) *Sentinels {
	tb.Helper()
	bin := tool(tb, "redis-server")
	host, pport, _ := net.SplitHostPort(primary.Addr)
	ss := &Sentinels{tb: tb, Name: name}
	for range n {
		port := freePort(tb, false)
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		// Sentinel rewrites its file as it learns the topology, so each
		// has its own, in its own directory.
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n"+
			"sentinel parallel-syncs %s %d\n",
			port, dir, name, host, pport, n/2+1,
			name, SentinelDownAfter.Milliseconds(), name, failoverTimeout.Milliseconds(), name, len(replicas))
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			tb.Fatalf("redistest: sentinel config: %v", err)
		}
		s := &Server{tb: tb, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir,
			args: []string{conf, "--sentinel"}}
		s.start(bin)
		tb.Cleanup(func() { s.Kill9() })
		ss.Servers = append(ss.Servers, s)
	}
	for _, s := range ss.Servers {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1})
		var state string
		err := poll(readyTimeout, func(ctx context.Context) (bool, error) {
			rs, err := c.Replicas(ctx, name).Result()
			if err != nil {
				return false, err
			}
			others, err := c.Sentinels(ctx, name).Result()
			if err != nil {
				return false, err
			}
			// A replica Sentinel has only heard of (from the primary's INFO)
			// is "disconnected" until it has its own link, and no failover
			// would pick it.
			ready := 0
			for _, r := range rs {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					ready++
				}
			}
			state = fmt.Sprintf("%d replicas ready of %d, %d other sentinels", ready, len(rs), len(others))
			if ready < len(replicas) || len(others) < n-1 {
				return false, nil
			}
			return c.CkQuorum(ctx, name).Err() == nil, nil
		})
		c.Close()
		if err != nil {
			tb.Fatalf("redistest: sentinel %s not ready (%s): %v\n%s", s.Addr, state, err, s.Logs())
		}
	}
	return ss
}

// Primary returns the primary's address as the first Sentinel that
// answers names it.
func (s *Sentinels) Primary() string {
	s.tb.Helper()
	for _, srv := range s.Servers {
		if addr, err := masterAddr(srv.Addr, s.Name); err == nil {
			return addr
		}
	}
	s.tb.Fatalf("redistest: no sentinel names the primary of %s", s.Name)
	return ""
}

// WaitNewPrimary waits until every running Sentinel names a primary other
// than old, the same one, and that server answers as a primary; it
// returns its address.
func (s *Sentinels) WaitNewPrimary(old string) string {
	s.tb.Helper()
	var addr string
	err := poll(failoverWait, func(ctx context.Context) (bool, error) {
		addr = ""
		for _, srv := range s.Servers {
			a, err := masterAddr(srv.Addr, s.Name)
			if err != nil {
				continue // a Sentinel the test killed
			}
			if a == old || (addr != "" && a != addr) {
				return false, nil
			}
			addr = a
		}
		if addr == "" {
			return false, nil
		}
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master"), err
	})
	if err != nil {
		s.tb.Fatalf("redistest: no new primary for %s (was %s) within %s: %v", s.Name, old, failoverWait, err)
	}
	return addr
}

// Failover asks a Sentinel to fail the primary over now (SENTINEL
// FAILOVER), as an operator's switch-over does: the primary is demoted to
// a replica of the one promoted.
func (s *Sentinels) Failover() {
	s.tb.Helper()
	c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Servers[0].Addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Failover(ctx, s.Name).Err(); err != nil {
		s.tb.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.Name, err)
	}
}

// FailoverOptions are a failover client's options for these Sentinels.
func (s *Sentinels) FailoverOptions() *goredis.FailoverOptions {
	return &goredis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Addrs()}
}

func masterAddr(sentinel, name string) (string, error) {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: sentinel, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	if len(r) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %v", r)
	}
	return net.JoinHostPort(r[0], r[1]), nil
}

// poll calls f, each time with a second's context, until it reports done,
// or fails with f's last error once d has passed. It polls the servers'
// own reports of their state, which no channel carries.
func poll(d time.Duration, f func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok, err := f(ctx)
		cancel()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not within %s", d)
			}
			return err
		}
		time.Sleep(50 * time.Millisecond) // between reads of the servers' state
	}
}
