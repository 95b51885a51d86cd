// Package redistest gives tests a real Redis to talk to, under a key
// prefix of their own, and starts throwaway servers (one, a primary with
// replicas watched by Sentinels, or a three-node cluster) for tests that
// must kill or reconfigure them.
//
// The shared server is, in order: the address or redis:// URL in
// PORCH_TEST_REDIS; else a local server at LocalAddr, when it answers PING
// within LocalTimeout; else the test is skipped with a one-line reason that
// names PORCH_TEST_REDIS. Set PORCH_REQUIRE_REDIS=1 to turn that skip into
// a failure, as CI does, so a missing server cannot pass silently.
//
// StartServer, StartDurableServer, StartReplica, StartSentinels,
// StartCluster and StartClusterServers run redis-server (and redis-cli)
// from PATH; without them the test is skipped, or fails under
// PORCH_REQUIRE_REDIS.
package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const (
	// EnvAddr names the variable holding the server's address (host:port)
	// or redis:// URL.
	EnvAddr = "PORCH_TEST_REDIS"
	// EnvRequire names the variable that turns a missing server into a
	// failure instead of a skip.
	EnvRequire = "PORCH_REQUIRE_REDIS"
	// LocalAddr is the server tried when EnvAddr is unset.
	LocalAddr = "127.0.0.1:6379"
	// LocalTimeout bounds the try of LocalAddr.
	LocalTimeout = 2 * time.Second
	// readyTimeout bounds how long a started server may take to answer.
	readyTimeout = 15 * time.Second
	// StoreTimeout is the redis.Options.Timeout of tests that are not
	// about it. The default, 250ms, fits a healthy server on a quiet
	// machine; a burst of hundreds of hits under -race beside other work
	// waited longer for its reply, failed closed, and was counted by the
	// server all the same, so that the test saw errors and a count above
	// what it served. A test of the timeout sets its own.
	StoreTimeout = 10 * time.Second
)

var (
	serverOnce sync.Once
	serverOpt  *goredis.Options
	serverErr  error
)

// Options returns the shared server's client options (a fresh copy), or
// skips tb (fails it under EnvRequire) when there is none.
func Options(tb testing.TB) *goredis.Options {
	tb.Helper()
	serverOnce.Do(func() { serverOpt, serverErr = find(os.Getenv) })
	if serverErr != nil {
		unavailable(tb, serverErr)
		return nil
	}
	o := *serverOpt
	return &o
}

// Addr returns the shared server's address (see Options).
func Addr(tb testing.TB) string {
	tb.Helper()
	return Options(tb).Addr
}

// Client returns a client of the shared server, closed when tb ends.
func Client(tb testing.TB) *goredis.Client {
	tb.Helper()
	c := goredis.NewClient(Options(tb))
	tb.Cleanup(func() { c.Close() })
	return c
}

// find returns the options of the first server that answers, in the
// package's order. A set EnvAddr that does not answer is an error, not a
// fall-through: the user named that server.
func find(getenv func(string) string) (*goredis.Options, error) {
	if v := getenv(EnvAddr); v != "" {
		opt, err := ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvAddr, err)
		}
		if err := ping(opt, 10*time.Second); err != nil {
			return nil, fmt.Errorf("%s is set but %s does not answer: %w", EnvAddr, opt.Addr, err)
		}
		return opt, nil
	}
	opt := &goredis.Options{Addr: LocalAddr}
	if err := ping(opt, LocalTimeout); err != nil {
		return nil, fmt.Errorf("set %s to a server's address to run these tests (none at %s: %v)", EnvAddr, LocalAddr, err)
	}
	return opt, nil
}

// ParseAddr reads host:port or a redis:// (rediss://) URL.
func ParseAddr(v string) (*goredis.Options, error) {
	if strings.Contains(v, "://") {
		return goredis.ParseURL(v)
	}
	if _, _, err := net.SplitHostPort(v); err != nil {
		return nil, fmt.Errorf("want host:port or a redis:// URL, got %q: %w", v, err)
	}
	return &goredis.Options{Addr: v}, nil
}

// ping asks opt's server for PONG once, within d.
func ping(opt *goredis.Options, d time.Duration) error {
	o := *opt
	o.MaxRetries = -1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = d, d, d
	c := goredis.NewClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Ping(ctx).Err()
}

// unavailable fails tb when a server is required, else skips it.
func unavailable(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv(EnvRequire) != "" {
		tb.Fatalf("redis required (%s is set) but unavailable: %v", EnvRequire, err)
		return
	}
	tb.Skipf("no redis: %v", err)
}

// Prefix returns a key prefix no other test uses ("porchtest:<random>:"),
// and deletes every key under it from c's server(s) when tb ends.
func Prefix(tb testing.TB, c goredis.UniversalClient) string {
	tb.Helper()
	var b [8]byte
	rand.Read(b[:])
	p := "porchtest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, c, p); err != nil {
			tb.Errorf("redistest: clean up keys %s*: %v", p, err)
		}
	})
	return p
}

// DeletePrefix deletes every key that starts with prefix, on every master
// of a cluster.
func DeletePrefix(ctx context.Context, c goredis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, node *goredis.Client) error {
		iter := node.Scan(ctx, 0, escapeGlob(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := node.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		return cc.ForEachMaster(ctx, del)
	case *goredis.Client:
		return del(ctx, cc)
	}
	return fmt.Errorf("redistest: cannot scan a %T", c)
}

// escapeGlob quotes SCAN MATCH's special characters.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Server is a redis-server this package started, on a loopback port, in
// a directory of the test's own.
type Server struct {
	tb   testing.TB
	Addr string
	Dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
	logs *bytes.Buffer
}

// StartServer runs a redis-server with args (after its own --port, --bind,
// --dir and --save ""; later arguments win, so "--save", "60 1" turns RDB
// snapshots back on) and waits until it answers PING. It is killed when
// tb ends.
func StartServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	bin := tool(tb, "redis-server")
	port := freePort(tb, false)
	s := &Server{tb: tb, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: tb.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no"}, args...)
	s.start(bin)
	tb.Cleanup(func() { s.Kill9() })
	return s
}

// StartDurableServer is StartServer for a server that makes every write
// durable before its reply (appendonly yes, appendfsync always, the AOF in
// the server's own directory), as redis.Options.RequireDurable asks: its
// counts survive Kill9 and Restart. args come after those, and win.
func StartDurableServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return StartServer(tb, append([]string{"--appendonly", "yes", "--appendfsync", "always"}, args...)...)
}

func (s *Server) start(bin string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, s.args...)
	s.logs = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: start redis-server: %v", err)
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); close(exit) }()
	s.cmd, s.exit = cmd, exit
	if err := waitReady(s.Addr, exit); err != nil {
		cmd.Process.Kill()
		<-exit
		s.tb.Fatalf("redistest: redis-server %s: %v\n%s", strings.Join(s.args, " "), err, s.logs.String())
	}
}

// Kill9 kills the server with SIGKILL, as a crash would, and waits for it
// to exit. It is safe to call on a stopped server.
func (s *Server) Kill9() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// Pause stops the server (SIGSTOP): connections stay open and nothing
// answers, as on a hung host. Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again, on its port and directory, with its
// arguments (after Kill9), and waits until it answers PING.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill9()
	s.start(tool(s.tb, "redis-server"))
}

// Logs returns what the server has printed since it last started.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them
// with redis-cli --cluster create (no replicas), waits until every node
// reports cluster_state:ok, and returns their addresses. They are killed
// when tb ends.
func StartCluster(tb testing.TB, n int, args ...string) []string {
	tb.Helper()
	nodes := StartClusterServers(tb, n, 0, args...)
	addrs := make([]string, n)
	for i, s := range nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// StartClusterServers starts masters (at least 3) cluster-enabled servers
// and replicas replicas of each, joins them with redis-cli --cluster
// create, and waits until every node reports cluster_state:ok and every
// master counts its replicas online. It returns every server, masters and
// replicas as redis-cli chose them (ask a node: ROLE, INFO replication).
// They are killed when tb ends.
func StartClusterServers(tb testing.TB, masters, replicas int, args ...string) []*Server {
	tb.Helper()
	cli := tool(tb, "redis-cli")
	n := masters * (1 + replicas)
	nodes := make([]*Server, n)
	addrs := make([]string, n)
	for i := range n {
		bin := tool(tb, "redis-server")
		port := freePort(tb, true)
		s := &Server{tb: tb, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: tb.TempDir()}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.Dir,
			"--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"), "--cluster-node-timeout", "5000"}, args...)
		s.start(bin)
		tb.Cleanup(func() { s.Kill9() })
		nodes[i], addrs[i] = s, s.Addr
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, a := range addrs {
		for {
			info, err := clusterInfo(a)
			ok := err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384")
			if ok && replicas > 0 {
				ok, err = replicasOnline(a, replicas)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok within %s: %v\n%s", a, readyTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond) // polling the node's own report
		}
	}
	return nodes
}

// replicasOnline reports whether the node at addr is a replica, or a
// master with at least n replicas online.
func replicasOnline(addr string, n int) (bool, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return false, err
	}
	if strings.Contains(info, "role:slave") {
		return strings.Contains(info, "master_link_status:up"), nil
	}
	return strings.Count(info, ",state=online,") >= n, nil
}

func clusterInfo(addr string) (string, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.ClusterInfo(ctx).Result()
}

// waitReady polls addr with PING until it answers, the process exits, or
// readyTimeout passes.
func waitReady(addr string, exit <-chan struct{}) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exit:
			return errors.New("exited before answering PING")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %s: %w", readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond) // between PINGs: readiness is the PONG
	}
}

// tool finds name on PATH, or skips tb (fails it under EnvRequire).
func tool(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(tb, fmt.Errorf("%s not found: %w", name, err))
	}
	return p
}

// freePort returns a loopback port nothing listens on (and, for a cluster
// node, whose bus port, port+10000, is free too).
func freePort(tb testing.TB, bus bool) int {
	tb.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("redistest: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		lb.Close()
		return port
	}
	tb.Fatal("redistest: no free port pair for a cluster node")
	return 0
}
