//go:build acceptance

package acceptance

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
)

// The legs of -rate-lease (rate.Options.Lease): two instances on one
// shared store, each counting a busy client's hits up to leaseN ahead in
// the store and answering them from memory. Never over the limit; at
// most leaseN per instance counted and not answered while they run, given
// back when the client idles (100 ms) and on SIGTERM, so that the
// store then holds exactly what was served; a kill -9 over-counts by at
// most leaseN and the requests the killed instance was answering.

const (
	leaseLimit = 100 // per client per hour
	leaseN     = 16  // -rate-lease
	leaseBurst = 300 // the parallel burst, over both instances
	leaseWarm  = 10  // sequential requests before it, alternating
	// leaseWorkers sequential senders per instance make the loads; a
	// load of leaseSteady requests in all, under the limit by more than
	// what two leases may hold, is never refused.
	leaseWorkers = 4
	leaseSteady  = 64
	leaseStopAt  = 30 // served when SIGTERM or kill -9 interrupts a load
)

// The gate's clients (X-Forwarded-For, -trust-proxy), each with a
// counter of its own: one the burst exhausts, one under a steady load, one
// under a load that SIGTERM interrupts (TestPostgresRateLeaseKill9: that
// kill -9 interrupts). The loads stay far enough under the limit that
// neither instance can be refused while the other holds a lease.
var (
	leaseBurstClient  = clientIP(0)
	leaseSteadyClient = clientIP(1)
	leaseStopClient   = clientIP(2)
)

// leaseFlags is the command line of every instance in these legs; the
// metrics give the store's writes (porch_store_batch_size_sum).
func leaseFlags() []string {
	return []string{"-trust-proxy", "-rate-limit", strconv.Itoa(leaseLimit), "-rate-window", "1h",
		"-rate-lease", strconv.Itoa(leaseN), "-metrics-addr", "127.0.0.1:0"}
}

// leaseKey is the general limiter's counter key for a client address.
func leaseKey(ip string) string { return "rate:default:ip:" + ip }

// storedFunc reads what the shared store holds of a client's count (0 for
// no counter), from outside the storefronts.
type storedFunc func(t *testing.T, ip string) int64

// Two instances on one PostgreSQL schema with -rate-lease 16.
func TestPostgresRateLeaseAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn := legDSN(t)
	a, b := startPair(t, dsn, leaseFlags()...)
	pg := openPG(t, dsn)
	leaseAcross(t, a, b, pg.stored)
}

// Two instances on one durable Redis (appendonly yes, appendfsync always,
// -redis-require-durable: the deployment docs/deploying.md asks for) with
// -rate-lease 16.
func TestRedisRateLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartDurableServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	flags := append([]string{"-redis", "redis://" + srv.Addr + "/0", "-redis-require-durable"}, leaseFlags()...)
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)
	leaseAcross(t, a, b, redisStored(c))
}

// leaseAcross drives a and b, which share the store stored reads, and
// stops them:
//
//  1. One client's parallel burst over both: served at most the limit, and
//     at least the limit less what the two leases may hold unanswered;
//     then, both still running, the store comes down to exactly what was
//     served once the client idles (100 ms).
//  2. Another client's steady load, well under its limit: the store is
//     written far less often than requests are served (the leases answer
//     the rest; without them every request is a write), and once the load
//     ends, the store comes down to exactly what was served.
//  3. A third client's steady load, with SIGTERM to both mid-load: once
//     they exit the store holds exactly what each client was served, the
//     leases held at the stop given back by Close.
func leaseAcross(t *testing.T, a, b *storefront, stored storedFunc) {
	t.Helper()
	both := []*storefront{a, b}
	idle := func(what, ip string, served int64) int64 {
		t.Helper()
		held := stored(t, ip) - served
		waitFor(t, 10*time.Second, what+": the store down to what was served, the leases given back once the client idles", func() bool {
			return stored(t, ip) == served
		})
		return held
	}

	// 1. The burst.
	burstServed := int64(0)
	for i := range leaseWarm {
		r := both[i%2].get(t, limited, "X-Forwarded-For", leaseBurstClient)
		if r.Status != http.StatusOK {
			t.Fatalf("warm-up request %d: got %s, want 200", i+1, r)
		}
		checkAlgRate(t, r, leaseLimit)
		burstServed++
	}
	a.warm(t, leaseBurst/2)
	b.warm(t, leaseBurst/2)
	rs := parallel(leaseBurst, func(i int) reply {
		return both[i%2].try(http.MethodGet, limited, "", "X-Forwarded-For", leaseBurstClient)
	})
	counts := statuses(rs)
	if len(counts) > 2 || counts[http.StatusOK]+counts[http.StatusTooManyRequests] != leaseBurst {
		t.Fatalf("%d parallel requests: got statuses %v, want only 200 and 429", leaseBurst, counts)
	}
	for _, r := range rs {
		checkAlgRate(t, r, leaseLimit)
	}
	burstServed += int64(counts[http.StatusOK])
	if burstServed > leaseLimit || burstServed < leaseLimit-2*leaseN {
		t.Errorf("served %d (%d warm-up, then %v) over 2 instances with -rate-lease %d: want %d..%d (the limit, less what 2 leases may hold)",
			burstServed, leaseWarm, counts, leaseN, leaseLimit-2*leaseN, leaseLimit)
	}
	held := idle("burst", leaseBurstClient, burstServed)
	t.Logf("burst: %d warm-up and %d parallel over 2 instances, limit %d, -rate-lease %d: %v, %d served; %d counted ahead and not answered, given back when idle",
		leaseWarm, leaseBurst, leaseLimit, leaseN, counts, burstServed, held)

	// 2. The steady load, and the store's writes under it, read once it
	// has ended, so that every request served is in them.
	before := storeWrites(t, both)
	ld := startLoad(both, leaseWorkers, leaseSteadyClient, leaseSteady, 0)
	ld.wait(t, "the steady load sent")
	ld.check(t, false, false)
	writes, steadyServed := storeWrites(t, both)-before, ld.served()
	if steadyServed != leaseSteady {
		t.Fatalf("steady load: served %d, want all %d", steadyServed, leaseSteady)
	}
	// Without a lease each request served is a write of its own. With one,
	// each instance's first hits go to the store one each, as many as are
	// in flight before the first answer; then a trip counts 2, 3, 5, 9 and
	// at most 1+leaseN, and its lease answers the rest.
	if writes*2 > steadyServed {
		t.Errorf("steady load: %d requests served for %d store writes, want at most half as many writes: the leases answer little or nothing", steadyServed, writes)
	}
	held = idle("steady", leaseSteadyClient, steadyServed)
	t.Logf("steady load: %d served by %d senders per instance for %d store writes; %d counted ahead and not answered when it ended, given back when idle",
		steadyServed, leaseWorkers, writes, held)

	// 3. Another client's steady load, SIGTERM to both mid-load.
	ld = startLoad(both, leaseWorkers, leaseStopClient, leaseSteady, leaseStopAt)
	ld.waitMark(t)
	stopAll(t, both...)
	ld.halt()
	ld.check(t, true, false)
	for _, c := range []struct {
		name   string
		ip     string
		served int64
	}{
		{"burst", leaseBurstClient, burstServed},
		{"steady", leaseSteadyClient, steadyServed},
		{"stopped mid-load", leaseStopClient, ld.served()},
	} {
		if got := stored(t, c.ip); got != c.served {
			t.Errorf("%s client after SIGTERM: the store holds %d, want exactly the %d served (the leases given back on Close)", c.name, got, c.served)
		}
	}
	t.Logf("SIGTERM to both at %d served: %d served in all, %d requests without an answer",
		leaseStopAt, ld.served(), ld.noAnswer.Load())
}

// kill -9 one instance mid-load: its lease's hits were counted and are
// never answered nor given back, so the store over-counts by at most
// leaseN and the requests it was answering when it died; it never holds
// less than was served.
func TestPostgresRateLeaseKill9(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testPostgresRateLeaseKill9)
}

func testPostgresRateLeaseKill9(t *testing.T, durability []string) {
	dsn := legDSN(t)
	a, b := startPair(t, dsn, with(leaseFlags(), durability...)...)
	pg := openPG(t, dsn)

	// a's senders stop at their first request without an answer, once it
	// is killed; b's go on until each is refused, the store at the limit
	// with a's lost lease in it.
	ld := startLoad([]*storefront{a, b}, leaseWorkers, leaseStopClient, 0, leaseStopAt)
	ld.waitMark(t)
	a.kill(t)
	atKill := [2]int64{ld.by[0].ok.Load(), ld.by[1].ok.Load()}
	ld.wait(t, "every sender on b refused")
	ld.check(t, true, true)
	if n := ld.by[1].noAnswer.Load(); n > 0 {
		t.Fatalf("%d requests got no answer from b, which was not killed", n)
	}
	b.stop(t)

	served, lost := ld.served(), ld.by[0].noAnswer.Load()
	got := pg.stored(t, leaseStopClient)
	switch {
	case served > leaseLimit:
		t.Errorf("served %d, over the limit of %d", served, leaseLimit)
	case got < served:
		t.Errorf("the store holds %d, less than the %d served: under-counted", got, served)
	case got > served+leaseN+lost:
		t.Errorf("the store holds %d for %d served: over-counted by %d, want at most -rate-lease %d and the %d requests a died answering",
			got, served, got-served, leaseN, lost)
	}
	t.Logf("kill -9 of a at %d served (a %d, b %d): served %d in all (a %d, b %d), %d requests on a without an answer; the store holds %d (%d over)",
		atKill[0]+atKill[1], atKill[0], atKill[1], served, ld.by[0].ok.Load(), ld.by[1].ok.Load(), lost, got, got-served)
}

// load is senders per instance, each sending GET limited as one client,
// one request at a time, until halted, until the load has sent its budget,
// or until its own request gets no answer (the instance stopped) or a 429.
type load struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once every sender has stopped
	budget int64         // requests to send in all; 0: no bound
	sent   atomic.Int64
	mark   int64         // served requests that close marked; 0: none
	marked chan struct{} // closed when mark requests have been served

	by                         []loadCounts // per instance
	ok, refused, noAnswer, bad atomic.Int64 // in all
	firstBad                   atomic.Value // string
}

// loadCounts is what one instance answered a load.
type loadCounts struct{ ok, noAnswer atomic.Int64 }

func startLoad(instances []*storefront, senders int, ip string, budget, mark int64) *load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{cancel: cancel, done: make(chan struct{}), budget: budget, mark: mark, marked: make(chan struct{}),
		by: make([]loadCounts, len(instances))}
	var wg sync.WaitGroup
	for i, s := range instances {
		for range senders {
			wg.Go(func() {
				for ctx.Err() == nil && (budget == 0 || ld.sent.Add(1) <= budget) {
					r := s.try(http.MethodGet, limited, "", "X-Forwarded-For", ip)
					switch {
					case r.Err != nil:
						ld.noAnswer.Add(1)
						ld.by[i].noAnswer.Add(1)
						return
					case r.Status == http.StatusOK:
						ld.by[i].ok.Add(1)
						if ld.ok.Add(1) == mark {
							close(ld.marked)
						}
					case r.Status == http.StatusTooManyRequests:
						ld.refused.Add(1)
						return
					default:
						ld.bad.Add(1)
						ld.firstBad.CompareAndSwap(nil, r.String())
						return
					}
				}
			})
		}
	}
	go func() { wg.Wait(); close(ld.done) }() // joined by halt and wait
	return ld
}

func (ld *load) served() int64 { return ld.ok.Load() }

// waitMark waits until the load has served its mark; it fails the test if
// every sender stops first.
func (ld *load) waitMark(t *testing.T) {
	t.Helper()
	select {
	case <-ld.marked:
	case <-ld.done:
		ld.check(t, false, false)
		t.Fatalf("the load ended at %d served, before its mark of %d", ld.served(), ld.mark)
	case <-time.After(30 * time.Second):
		ld.halt()
		t.Fatalf("the load served %d within 30s, want %d", ld.served(), ld.mark)
	}
}

// wait waits until every sender has stopped by itself.
func (ld *load) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-ld.done:
	case <-time.After(30 * time.Second):
		ld.halt()
		t.Fatalf("%s: not within 30s (%d served)", what, ld.served())
	}
}

// halt stops the senders and waits for them.
func (ld *load) halt() {
	ld.cancel()
	<-ld.done
}

// check fails unless every reply was a 200, or a 429 if the client was
// to reach its limit (limited), or no answer if an instance was to stop
// (stopped).
func (ld *load) check(t *testing.T, stopped, limited bool) {
	t.Helper()
	if n := ld.bad.Load(); n > 0 {
		t.Fatalf("%d replies neither 200 nor 429; first: %v", n, ld.firstBad.Load())
	}
	if n := ld.noAnswer.Load(); n > 0 && !stopped {
		t.Fatalf("%d requests got no answer from a running instance", n)
	}
	if n := ld.refused.Load(); n > 0 && !limited {
		t.Fatalf("%d requests refused with 429 after %d served, under the limit of %d", n, ld.served(), leaseLimit)
	}
}

// stopAll sends SIGTERM to every s at once, then wants each to exit 0, as
// stop does for one.
func stopAll(t *testing.T, ss ...*storefront) {
	t.Helper()
	for _, s := range ss {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
	}
	for _, s := range ss {
		s.waitExit(t, "SIGTERM")
		s.client.CloseIdleConnections()
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("after SIGTERM: got %v, want exit status 0\n%s", s.cmd.ProcessState, s.output())
		}
	}
}

// storeWrites sums the writes the instances' stores have carried
// (porch_store_batch_size_sum): hits, take-backs and health probes.
func storeWrites(t *testing.T, ss []*storefront) int64 {
	t.Helper()
	var n float64
	for _, s := range ss {
		n += s.scrape(t)["porch_store_batch_size_sum"]
	}
	return int64(n)
}

// stored is the count porch_rate_counters holds for ip's general-limiter
// key, 0 without a row.
func (d *pgDB) stored(t *testing.T, ip string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT count FROM porch_rate_counters WHERE key = convert_to($1, 'UTF8')`, leaseKey(ip)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("read porch_rate_counters: %v", err)
	}
	return n
}

// redisStored reads a client's count (the hash field c) from the key of
// c's server that ends in its general-limiter key, after the store's
// prefix and hash tag.
func redisStored(c *goredis.Client) storedFunc {
	return func(t *testing.T, ip string) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
		defer cancel()
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("KEYS *: %v", err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, "}"+leaseKey(ip)) {
				continue
			}
			n, err := c.HGet(ctx, k, "c").Int64()
			if err != nil {
				t.Fatalf("HGET %s c: %v", k, err)
			}
			return n
		}
		return 0
	}
}
