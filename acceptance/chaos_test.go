//go:build acceptance

package acceptance

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The chaos legs (issue 8): for -duration, workers send keyed checkouts —
// fresh keys, retries, bursts of concurrent duplicates, requests whose client
// hangs up mid-flight — while a fault driver kills storefronts with SIGKILL
// and restarts them, and on PostgreSQL terminates an instance's database
// sessions. Then every key is retried until it answers, the storefronts are
// stopped, and the tables are checked against everything the clients saw.
//
// The schedule (which key, which fault, when) comes from -seed and is printed,
// so a failing schedule can be run again with the command it logs; the
// interleaving of real processes is not replayable, only the schedule.
var (
	chaosDuration = flag.Duration("duration", 30*time.Second, "chaos legs: how long faults are injected, per backend (half at each -durability)")
	chaosSeed     = flag.Uint64("seed", 0, "chaos legs: the schedule's seed (0: from the clock)")
)

// Chaos parameters. The rate limit is small enough that busy clients reach
// it, so the legs also check that no fault lets a request past its limit.
const (
	chaosWorkers      = 12
	chaosLimit        = 20
	chaosOpsPerSec    = 400 // the workers' pace: a request or a burst each; half make a new key
	chaosKeysPerIP    = 8   // consecutive keys share a client address
	chaosFinalTimeout = 60 * time.Second
)

// chaosKey is one idempotency key and the request it always carries.
type chaosKey struct {
	key, body, ip string
}

// chaosSeen is one response a client received.
type chaosSeen struct {
	key      int
	ip       string
	status   int
	body     []byte
	replayed bool
	final    bool // from the final pass, on a fresh address
}

// chaosTarget is a set of storefront instances the workers spread over and
// the faults that can be done to them. Its methods are called from the test
// goroutine only, except url.
type chaosTarget interface {
	// url returns a running instance's base URL, chosen by r; it may die
	// before the request lands, which the workers expect.
	url(r *rand.Rand) string
	// fault injects one fault chosen by r and names it.
	fault(t *testing.T, r *rand.Rand) string
	// stop stops every instance gracefully (SIGTERM, exit 0).
	stop(t *testing.T)
	// orders reads operation_id → order_ids from the shop's table.
	orders(t *testing.T) map[string][]string
}

// chaosRun is one leg's state: the keys made so far and every response seen.
type chaosRun struct {
	seed     uint64
	target   chaosTarget
	duration time.Duration // how long faults are injected
	client   *http.Client
	pace     <-chan time.Time // one tick per operation, shared by the workers

	mu     sync.Mutex // protects keys and seen
	keys   []chaosKey
	seen   []chaosSeen
	spans  spanLog // the executed handlers' spans, by client (chaos_inflight_test.go)
	sent   atomic.Int64
	hung   atomic.Int64
	bursts atomic.Int64
}

func newChaosRun(t *testing.T, target chaosTarget, duration time.Duration) *chaosRun {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d, duration %s (replay the schedule: ./acceptance.sh -run '^%s$' -timeout 2h -- -seed %d -duration %s)",
		seed, duration, t.Name(), seed, *chaosDuration)
	return &chaosRun{
		seed: seed, target: target, duration: duration,
		client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 2 * chaosWorkers, IdleConnTimeout: 5 * time.Second, DisableCompression: true,
		}},
	}
}

// pickKey makes the next key if fresh, or returns a random existing one.
func (c *chaosRun) pickKey(r *rand.Rand, fresh bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fresh || len(c.keys) == 0 {
		i := len(c.keys)
		c.keys = append(c.keys, chaosKey{
			key:  fmt.Sprintf("chaos-%d-%d", c.seed, i),
			body: fmt.Sprintf(`{"sku":"%s","qty":%d}`, []string{"mug", "tea-green", "tea-black"}[i%3], i%1000+1),
			ip:   fmt.Sprintf("10.%d.%d.%d", i/chaosKeysPerIP/65536%256, i/chaosKeysPerIP/256%256, i/chaosKeysPerIP%256),
		})
		return i
	}
	return r.IntN(len(c.keys))
}

func (c *chaosRun) key(i int) chaosKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys[i]
}

// send posts key i's checkout to base from ip. A positive hangUp cancels the
// request after that long, closing its connection. It records any response.
func (c *chaosRun) send(ctx context.Context, base string, i int, ip string, hangUp time.Duration, final bool) (int, error) {
	k := c.key(i)
	if hangUp > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, hangUp)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/checkout", strings.NewReader(k.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(keyHeader, k.key)
	req.Header.Set("X-Forwarded-For", ip)
	c.sent.Add(1)
	res, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	if res.StatusCode == http.StatusCreated {
		c.spans.add(ip, res.Header)
	}
	c.mu.Lock()
	c.seen = append(c.seen, chaosSeen{key: i, ip: ip, status: res.StatusCode, body: body,
		replayed: res.Header.Get(replayedHeader) == "true", final: final})
	c.mu.Unlock()
	return res.StatusCode, nil
}

// work sends requests until ctx ends: fresh keys and retries, a burst of
// concurrent duplicates now and then, and clients that hang up.
func (c *chaosRun) work(ctx context.Context, w int) {
	r := rand.New(rand.NewPCG(c.seed, uint64(w)+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.pace:
		}
		i := c.pickKey(r, r.IntN(2) == 0)
		ip := c.key(i).ip
		switch p := r.IntN(100); {
		case p < 15: // a burst of duplicates, in flight at once
			n := 2 + r.IntN(3)
			c.bursts.Add(1)
			var wg sync.WaitGroup
			for range n {
				base := c.target.url(r)
				wg.Go(func() { c.send(ctx, base, i, ip, 0, false) }) //nolint:errcheck // recorded or lost with the process
			}
			wg.Wait()
		case p < 30: // the client hangs up after up to 20 ms
			c.hung.Add(1)
			c.send(ctx, c.target.url(r), i, ip, time.Duration(1+r.IntN(20))*time.Millisecond, false) //nolint:errcheck
		default:
			c.send(ctx, c.target.url(r), i, ip, 0, false) //nolint:errcheck
		}
	}
}

// run injects faults for the leg's duration while the workers send, then
// retries every key until it answers and checks the invariants.
func (c *chaosRun) run(t *testing.T) {
	r := rand.New(rand.NewPCG(c.seed, 0))
	ctx, cancel := context.WithCancel(context.Background())
	pace := time.NewTicker(time.Second / chaosOpsPerSec)
	defer pace.Stop()
	c.pace = pace.C
	var wg sync.WaitGroup
	for w := range chaosWorkers {
		wg.Go(func() { c.work(ctx, w) })
	}
	faults := map[string]int{}
	deadline := time.After(c.duration)
	for done := false; !done; {
		select {
		case <-deadline:
			done = true
		case <-time.After(time.Duration(200+r.IntN(1300)) * time.Millisecond): // the schedule's pace, not a synchronisation
			faults[c.target.fault(t, r)]++
		}
	}
	cancel()
	wg.Wait()
	c.finalPass(t, r)
	c.target.stop(t)
	c.check(t, faults)
}

// finalPass retries every key from a fresh client address (so that no
// limit stands between a key and its answer) until it answers 201.
func (c *chaosRun) finalPass(t *testing.T, r *rand.Rand) {
	c.mu.Lock()
	n := len(c.keys)
	c.mu.Unlock()
	var next, attempt atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(chaosFinalTimeout)
	for w := range chaosWorkers {
		wr := rand.New(rand.NewPCG(c.seed, uint64(1000+w)))
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				for {
					a := attempt.Add(1)
					ip := fmt.Sprintf("172.%d.%d.%d", 16+a/65536%16, a/256%256, a%256)
					status, err := c.send(context.Background(), c.target.url(wr), i, ip, 0, true)
					if err == nil && status == http.StatusCreated {
						break
					}
					if err == nil && status != http.StatusServiceUnavailable && status != http.StatusConflict {
						break // recorded; check reports it
					}
					if time.Now().After(deadline) {
						failed.Add(1)
						break
					}
					time.Sleep(10 * time.Millisecond) // back off from a 503 or a refused connection
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Errorf("final pass: %d keys still unanswered after %s", f, chaosFinalTimeout)
	}
	_ = r
}

// check holds the run against the invariants: every key has exactly one
// order, every 2xx for a key is byte-identical and carries that order's
// id, and no client was served past its limit.
func (c *chaosRun) check(t *testing.T, faults map[string]int) {
	orders := c.target.orders(t)
	statuses := map[int]int{}
	byKey := make([][]chaosSeen, len(c.keys))
	servedByIP := map[string]int{}
	replays := 0
	for _, s := range c.seen {
		statuses[s.status]++
		switch s.status {
		case http.StatusCreated:
			byKey[s.key] = append(byKey[s.key], s)
			servedByIP[s.ip]++
			if s.replayed {
				replays++
			}
		case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusConflict:
		default:
			t.Errorf("key %s: unexpected answer %d %s", c.keys[s.key].key, s.status, s.body)
		}
	}
	doubled, lost, mismatched := 0, 0, 0
	matched := map[string]bool{}
	for i, seen := range byKey {
		if len(seen) == 0 {
			lost++
			t.Errorf("key %s: never answered 201", c.keys[i].key)
			continue
		}
		var o struct {
			OrderID     string `json:"order_id"`
			OperationID string `json:"operation_id"`
		}
		if err := json.Unmarshal(seen[0].body, &o); err != nil || o.OrderID == "" || o.OperationID == "" {
			t.Errorf("key %s: 201 body %s: want order_id and operation_id (%v)", c.keys[i].key, seen[0].body, err)
			continue
		}
		for _, s := range seen[1:] {
			if string(s.body) != string(seen[0].body) {
				mismatched++
				t.Errorf("key %s: 201 bodies differ:\n%s\n%s", c.keys[i].key, seen[0].body, s.body)
			}
		}
		matched[o.OperationID] = true
		switch ids := orders[o.OperationID]; {
		case len(ids) == 0:
			lost++
			t.Errorf("key %s: answered 201 with order %s, but no order row", c.keys[i].key, o.OrderID)
		case len(ids) > 1:
			doubled++
			t.Errorf("key %s: %d order rows %v, want 1", c.keys[i].key, len(ids), ids)
		case ids[0] != o.OrderID:
			mismatched++
			t.Errorf("key %s: answered order %s, row holds %s", c.keys[i].key, o.OrderID, ids[0])
		}
	}
	for op, ids := range orders {
		if !matched[op] {
			doubled++
			t.Errorf("order rows %v (operation %s) belong to no answered key", ids, op)
		}
	}
	over := 0
	for ip, n := range servedByIP {
		if n > chaosLimit {
			over++
			t.Errorf("client %s: served %d, limit %d", ip, n, chaosLimit)
		}
	}
	deepest, spans := c.spans.check(t, chaosInflight)
	t.Logf("in flight: %d executed handlers' spans, at most %d of one client at once (-inflight-limit %d)", spans, deepest, chaosInflight)
	names := make([]string, 0, len(faults))
	total := 0
	for f, n := range faults {
		names = append(names, fmt.Sprintf("%s×%d", f, n))
		total += n
	}
	sort.Strings(names)
	t.Logf("chaos seed %d: %d keys, %d requests (%d bursts of duplicates, %d hang-ups), %d faults (%s); statuses %v, %d replays; doubled %d, lost %d, mismatched %d, clients over limit %d",
		c.seed, len(c.keys), c.sent.Load(), c.bursts.Load(), c.hung.Load(), total, strings.Join(names, ", "),
		statuses, replays, doubled, lost, mismatched, over)
	if total == 0 {
		t.Errorf("no fault was injected: the leg proved nothing")
	}
}

// chaosFlags are the storefront flags of both legs: a small per-client
// limit over a window longer than the leg, clients told apart by
// X-Forwarded-For, a checkout that works a little before it writes, so
// that kills and hang-ups land inside handlers, and an in-flight limit
// whose handlers report their spans (chaos_inflight_test.go).
var chaosFlags = append([]string{"-rate-limit", fmt.Sprint(chaosLimit), "-rate-window", "1h", "-trust-proxy",
	"-checkout-delay", "3ms"}, chaosInflightFlags...)

// chaosAtEachDurability runs a chaos leg at each -durability in turn
// (not in parallel: each leg loads the machine), each for half of
// -duration, so that the gate takes no longer for the second level.
func chaosAtEachDurability(t *testing.T, leg func(t *testing.T, flags []string, duration time.Duration)) {
	for _, level := range durabilityLevels {
		t.Run(level, func(t *testing.T) {
			leg(t, with(chaosFlags, "-durability", level), *chaosDuration/time.Duration(len(durabilityLevels)))
		})
	}
}

// sqliteChaos is one storefront on one SQLite file, killed and restarted.
type sqliteChaos struct {
	db    string
	flags []string // chaosFlags and the leg's -durability
	cur   atomic.Pointer[storefront]
}

func (s *sqliteChaos) url(*rand.Rand) string { return s.cur.Load().url }

func (s *sqliteChaos) fault(t *testing.T, r *rand.Rand) string {
	s.cur.Load().kill(t)
	s.cur.Store(startStorefront(t, s.db, s.flags...))
	return "kill -9"
}

func (s *sqliteChaos) stop(t *testing.T) { s.cur.Load().stop(t) }

func (s *sqliteChaos) orders(t *testing.T) map[string][]string {
	db := openDB(t, s.db)
	defer db.Close()
	rows, err := db.Query(ordersByOperation)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	return scanOrders(t, rows)
}

// ordersByOperation reads the shop's orders on either backend.
const ordersByOperation = `SELECT order_id, coalesce(operation_id, '') FROM orders`

// rowScanner is what database/sql's and pgx's rows have in common.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanOrders groups ordersByOperation's rows: operation_id → order_ids.
func scanOrders(t *testing.T, rows rowScanner) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for rows.Next() {
		var id, op string
		if err := rows.Scan(&id, &op); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		out[op] = append(out[op], id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	return out
}

// TestChaosSQLite: one storefront on one SQLite file, killed with SIGKILL at
// random moments and restarted on the same file.
func TestChaosSQLite(t *testing.T) {
	chaosAtEachDurability(t, func(t *testing.T, flags []string, duration time.Duration) {
		s := &sqliteChaos{db: newDB(t), flags: flags}
		s.cur.Store(startStorefront(t, s.db, flags...))
		newChaosRun(t, s, duration).run(t)
	})
}

// pgChaos is two storefronts sharing one PostgreSQL schema; either may be
// killed and restarted, or have its database sessions terminated under it.
type pgChaos struct {
	dsn   string
	pg    *pgDB
	flags []string // chaosFlags and the leg's -durability
	inst  [2]atomic.Pointer[storefront]
}

func (p *pgChaos) url(r *rand.Rand) string { return p.inst[r.IntN(2)].Load().url }

func (p *pgChaos) fault(t *testing.T, r *rand.Rand) string {
	i := r.IntN(2)
	s := p.inst[i].Load()
	if r.IntN(2) == 0 {
		s.kill(t)
		p.inst[i].Store(startOnPostgres(t, p.dsn, fmt.Sprintf("chaos%d", i), p.flags...))
		return "kill -9"
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	var n int
	if err := p.pg.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, s.app).Scan(&n); err != nil {
		t.Fatalf("terminate %s's sessions: %v", s.app, err)
	}
	return "pg_terminate_backend"
}

func (p *pgChaos) stop(t *testing.T) {
	for i := range p.inst {
		p.inst[i].Load().stop(t)
	}
}

func (p *pgChaos) orders(t *testing.T) map[string][]string {
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	rows, err := p.pg.pool.Query(ctx, ordersByOperation)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	return scanOrders(t, rows)
}

// TestChaosPostgres: two storefronts on one PostgreSQL schema, each killed
// and restarted at random, or cut off from the database by
// pg_terminate_backend of every session it holds.
func TestChaosPostgres(t *testing.T) {
	chaosAtEachDurability(t, func(t *testing.T, flags []string, duration time.Duration) {
		dsn := legDSN(t)
		p := &pgChaos{dsn: dsn, pg: openPG(t, dsn), flags: flags}
		for i := range p.inst {
			p.inst[i].Store(startOnPostgres(t, dsn, fmt.Sprintf("chaos%d", i), flags...))
		}
		newChaosRun(t, p, duration).run(t)
	})
}
