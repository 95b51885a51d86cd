//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
)

// The legs of issue 17: the storefront's limiter counting on Redis
// (-redis, -redis-cluster) while idempotency keys stay on -db. The shared
// server is redistest's (PORCH_TEST_REDIS, else 127.0.0.1:6379, else the
// legs skip; PORCH_REQUIRE_REDIS=1 makes that a failure), each leg under a
// key prefix of its own; the legs that kill, pause or cluster a server
// start redis-server themselves.

// redisURL is the -redis URL of a server with opt's address, database
// and credentials.
func redisURL(opt *goredis.Options) string {
	u := url.URL{Scheme: "redis", Host: opt.Addr, Path: "/" + strconv.Itoa(opt.DB)}
	if opt.TLSConfig != nil {
		u.Scheme = "rediss"
	}
	if opt.Username != "" || opt.Password != "" {
		u.User = url.UserPassword(opt.Username, opt.Password)
	}
	return u.String()
}

// sharedRedis is the flags that put a storefront's counters on the shared
// server under a prefix fresh to the leg, whose keys are deleted when the
// leg ends (after its storefronts, which were started later).
func sharedRedis(t *testing.T) []string {
	t.Helper()
	opt := redistest.Options(t)
	p := redistest.Prefix(t, redistest.Client(t))
	return []string{"-redis", redisURL(opt), "-redis-prefix", p}
}

// clientIP is the X-Forwarded-For of the gate's client c, for storefronts
// started with -trust-proxy.
func clientIP(c int) string { return fmt.Sprintf("198.51.100.%d", c+1) }

// (a) Two instances on one Redis serve a parallel burst from one client
// exactly its limit, under each algorithm, each remaining count once.
func TestRedisRateAcrossInstances(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 100, 300, time.Hour
	for _, alg := range []string{"fixed", "sliding", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			flags := append(sharedRedis(t), algFlags(alg, limit, window, limit)...)
			a := startStorefront(t, newDB(t), flags...)
			b := startStorefront(t, newDB(t), flags...)
			concurrentExact(t, alg, limit, burst, a, b)
			// SIGTERM: the limiter, the pool, the Redis store, the SQL
			// store and the client close in order, exit status 0.
			a.stop(t)
			b.stop(t)
		})
	}
}

// -redis-require-durable refuses, with exit status 1 and the setting to
// change, a server that would forget a count it replied to.
func TestRedisRequireDurableRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t) // appendonly no
	out := refusedStartFlags(t, "-redis", "redis://"+srv.Addr+"/0", "-redis-require-durable")
	if !strings.Contains(out, "appendfsync always") {
		t.Errorf("storefront on a non-durable Redis with -redis-require-durable: got\n%s\nwant the reason naming appendfsync always", out)
	}
}

// refusedStartFlags runs the storefront with flags, fails unless it exits
// 1 before listening, and returns its output.
func refusedStartFlags(t *testing.T, flags ...string) string {
	t.Helper()
	args := append([]string{"-addr", "127.0.0.1:0", "-db", newDB(t)}, flags...)
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, storefrontBin, args...)
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || strings.Contains(string(out), listeningPrefix) {
		t.Fatalf("storefront %s: got %v, want exit status 1 before listening\n%s", strings.Join(flags, " "), cmd.ProcessState, out)
	}
	return string(out)
}

// (b) A durable Redis (appendonly yes, appendfsync always) killed with
// SIGKILL mid-load and restarted: no request sent while it is down is
// served, the storefront serves again without a restart of its own,
// clients at their limit before the kill stay limited, and no client is
// served more than its limit; one served less is explained by requests
// answered 503 that Redis counted before it died.
//
// At -durability process-crash the storefront cannot also ask
// -redis-require-durable; the server's appendfsync always still writes
// each count to disk before its reply, which is what this leg kills.
func TestRedisKill9StillLimited(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testRedisKill9StillLimited)
}

func testRedisKill9StillLimited(t *testing.T, durability []string) {
	const limit, window, clients, hot, workers = 40, time.Hour, 6, 3, 12
	srv := redistest.StartDurableServer(t)
	flags := with(durability, "-redis", "redis://"+srv.Addr+"/0",
		"-trust-proxy", "-rate-limit", strconv.Itoa(limit), "-rate-window", window.String())
	if durability[1] == "power-loss" {
		flags = append(flags, "-redis-require-durable")
	}
	s := startStorefront(t, newDB(t), flags...)
	s.warm(t, workers)

	const (
		up = iota
		down
		restarted
	)
	var (
		phase                atomic.Int32
		served, failed       [clients]atomic.Int64
		limitedBefore        [clients]atomic.Bool
		servedWhileDown, bad atomic.Int64
		failedWhileDown      atomic.Int64
		firstBad             atomic.Value
		ctx, stopLoad        = context.WithCancel(t.Context())
		load                 sync.WaitGroup
		hotClientsLimited    = func() bool { return limitedBefore[0].Load() && limitedBefore[1].Load() && limitedBefore[2].Load() }
		sequence             = []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5} // hot clients 4×
		unexpected           = func(r reply) { bad.Add(1); firstBad.CompareAndSwap(nil, r.String()) }
	)
	defer stopLoad()
	for w := range workers {
		load.Go(func() {
			for i := w; ctx.Err() == nil; i++ {
				c := sequence[i%len(sequence)]
				before := phase.Load()
				r := s.try(http.MethodGet, limited, "", "X-Forwarded-For", clientIP(c))
				after := phase.Load()
				switch {
				case r.Err != nil:
					unexpected(r)
				case r.Status == http.StatusOK:
					served[c].Add(1)
					if before == down && after == down {
						servedWhileDown.Add(1)
					}
				case r.Status == http.StatusTooManyRequests:
					if after == up {
						limitedBefore[c].Store(true)
					}
				case r.Status == http.StatusServiceUnavailable:
					failed[c].Add(1)
					if r.Header.Get("Retry-After") == "" {
						unexpected(r)
					}
					if before == down {
						failedWhileDown.Add(1)
					}
				default:
					unexpected(r)
				}
			}
		})
	}
	waitFor(t, 30*time.Second, "the hot clients at their limit", hotClientsLimited)
	srv.Kill9()
	phase.Store(down)
	waitFor(t, healthTimeout, "20 requests answered 503 while Redis is down", func() bool { return failedWhileDown.Load() >= 20 })
	waitFor(t, healthTimeout, "GET /healthz 503 while Redis is down", func() bool {
		return s.get(t, "/healthz").Status == http.StatusServiceUnavailable
	})
	phase.Store(restarted) // before Restart: a request that sees down was sent while no server ran
	srv.Restart()
	waitFor(t, healthTimeout, "GET /healthz 200 once Redis is back", func() bool { return s.get(t, "/healthz").Status == http.StatusOK })
	stopLoad()
	load.Wait()
	select {
	case <-s.exited:
		t.Fatalf("the storefront exited: %v", s.cmd.ProcessState)
	default:
	}

	for c := range clients {
		r := s.get(t, limited, "X-Forwarded-For", clientIP(c))
		if c < hot && r.Status != http.StatusTooManyRequests {
			t.Errorf("hot client %d, at its limit before the kill: got %s after the restart, want 429", c, r)
		}
		for n := 0; r.Status == http.StatusOK && n <= limit; n++ {
			served[c].Add(1)
			r = s.get(t, limited, "X-Forwarded-For", clientIP(c))
		}
		if r.Status != http.StatusTooManyRequests {
			t.Errorf("client %d: got %s after the restart, want 200s then 429", c, r)
		}
		got, lost := served[c].Load(), failed[c].Load()
		if got > limit || got+lost < limit {
			t.Errorf("client %d: served %d with %d answered 503; want at most %d, and at least %d less the 503s", c, got, lost, limit, limit)
		}
		t.Logf("client %d (hot %t): served %d, 503 %d", c, c < hot, got, lost)
	}
	if n := servedWhileDown.Load(); n != 0 {
		t.Errorf("%d requests sent and answered while Redis was down were served, want none", n)
	}
	if n := bad.Load(); n != 0 {
		t.Errorf("%d replies neither 200, 429 nor 503 with Retry-After; first: %v", n, firstBad.Load())
	}
	t.Logf("kill -9 of Redis (appendfsync always) with the hot clients at their limit: %d requests answered 503 while it was down, none served", failedWhileDown.Load())
}

// (c) Idempotency keys stay in -db beside the orders; then Redis hung
// (SIGSTOP) or dead (SIGKILL): every request answers 503
// problem+json with Retry-After, never a pass, counted as unavailable and
// logged, and /healthz answers 503; once Redis is back the same process
// serves again.
func TestRedisDownFailsClosed(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"pause", "kill"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			const burst = 20
			srv := redistest.StartServer(t)
			s := startStorefront(t, newDB(t), "-redis", "redis://"+srv.Addr+"/0", "-metrics-addr", "127.0.0.1:0",
				"-rate-limit", "100", "-rate-window", "1h")
			for range 3 {
				if r := s.get(t, limited); r.Status != http.StatusOK {
					t.Fatalf("GET %s before: got %s, want 200", limited, r)
				}
			}
			// The checkout's key and order are in the SQLite file; the
			// counters are not (they are in Redis).
			fresh(t, s.checkout("redis-split", mugOrder))
			if n := rowCount(t, s.db, "porch_idem_responses"); n != 1 {
				t.Errorf("porch_idem_responses in -db: got %d rows, want 1", n)
			}
			if cs := counters(t, s.db); len(cs) != 0 {
				t.Errorf("counters in -db: got %+v, want none (they are in Redis)", cs)
			}
			s.warm(t, burst) // while /healthz still answers 200
			if fault == "pause" {
				srv.Pause()
			} else {
				srv.Kill9()
			}
			var last reply
			waitFor(t, healthTimeout, "GET /healthz 503 while Redis is down", func() bool {
				last = s.get(t, "/healthz")
				return last.Status == http.StatusServiceUnavailable
			})
			checkProblem(t, last, http.StatusServiceUnavailable)
			if last.Header.Get("Retry-After") == "" {
				t.Errorf("503 /healthz: no Retry-After")
			}
			rs := parallel(burst, func(int) reply { return s.try(http.MethodGet, limited, "") })
			for _, r := range rs {
				checkProblem(t, r, http.StatusServiceUnavailable)
				if r.Header.Get("Retry-After") == "" {
					t.Errorf("503 %s: no Retry-After", limited)
				}
			}
			m := s.scrape(t)
			if got := m[`porch_rate_requests_total{limiter="default",verdict="unavailable"}`]; got < burst {
				t.Errorf("unavailable verdicts: got %g, want at least %d", got, burst)
			}
			if got := m["porch_store_commit_errors_total"]; got < 1 {
				t.Errorf("porch_store_commit_errors_total: got %g, want at least 1", got)
			}
			if !strings.Contains(s.stderr.String(), "porch: could not count this request") {
				t.Errorf("no log line for the failed counts\n%s", s.output())
			}

			if fault == "pause" {
				srv.Resume()
			} else {
				srv.Restart() // no persistence: a fresh count
			}
			waitFor(t, healthTimeout, "GET /healthz 200 once Redis is back", func() bool {
				last = s.get(t, "/healthz")
				return last.Status == http.StatusOK
			})
			if r := s.get(t, limited); r.Status != http.StatusOK {
				t.Errorf("GET %s after Redis is back: got %s, want 200", limited, r)
			}
			t.Logf("%s: %d requests answered 503 with Retry-After, /healthz 503, then 200 again without a restart", fault, burst)
		})
	}
}

// (d) Two instances on a three-node Redis Cluster: clients whose keys fall
// on different nodes, each sending a parallel burst over both instances
// at once, are each served exactly their limit.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	const limit, clients, perClient = 20, 8, 60
	addrs := redistest.StartCluster(t, 3)
	flags := []string{"-redis-cluster", strings.Join(addrs, ","), "-trust-proxy",
		"-rate-limit", strconv.Itoa(limit), "-rate-window", "1h"}
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)
	both := []*storefront{a, b}
	const burst = clients * perClient
	a.warm(t, burst/2)
	b.warm(t, burst/2)
	rs := parallel(burst, func(i int) reply {
		return both[i%2].try(http.MethodGet, limited, "", "X-Forwarded-For", clientIP(i%clients))
	})
	for c := range clients {
		var mine []reply
		for i := c; i < burst; i += clients {
			mine = append(mine, rs[i])
		}
		if got := statuses(mine); got[http.StatusOK] != limit || got[http.StatusTooManyRequests] != perClient-limit || len(got) != 2 {
			t.Errorf("client %d: %d parallel requests over 2 instances, limit %d: got %v, want %d×200 and %d×429",
				c, perClient, limit, got, limit, perClient-limit)
		}
	}

	// The clients' keys are spread over the cluster, not on one node.
	nodes := 0
	for _, addr := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		keys, err := c.Keys(t.Context(), "*rate:*").Result()
		c.Close()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", addr, err)
		}
		if len(keys) > 0 {
			nodes++
		}
		t.Logf("node %s holds %d counter keys", addr, len(keys))
	}
	if nodes < 2 {
		t.Errorf("the %d clients' counters are on %d node(s), want at least 2", clients, nodes)
	}
}
