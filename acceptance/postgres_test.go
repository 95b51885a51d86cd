//go:build acceptance

package acceptance

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// The legs of issue 4: two storefront processes on two ports share one
// PostgreSQL schema (pgtest.DSN: PORCH_TEST_POSTGRES, else a local server at
// pgtest.LocalDSN, else a dockertest container, else a skip, which
// PORCH_REQUIRE_POSTGRES=1 turns into a failure), as two replicas behind a
// load balancer would.

// legDSN is a fresh schema's DSN with each instance's application pool
// bounded to 8 connections. Several instances share one server, so its
// max_connections (100 by default) must cover instances × (pool_max_conns
// + KeyConns + the committer's 3; see docs/deploying.md), else the gate's
// parallel legs, or two instances warming up, exhaust it ("too many
// clients already"), as they would a deployment sized without that sum.
func legDSN(t *testing.T) string {
	t.Helper()
	return pgtest.WithParam(pgtest.DSN(t), "pool_max_conns", "8")
}

// startPair starts instances a and b on dsn with the same flags.
func startPair(t *testing.T, dsn string, flags ...string) (a, b *storefront) {
	t.Helper()
	return startOnPostgres(t, dsn, "a", flags...), startOnPostgres(t, dsn, "b", flags...)
}

// A burst spread over both instances is limited as one client: exactly N
// served in total, each remaining count handed out once.
func TestPostgresRateAcrossInstances(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 50, 200, time.Hour
	dsn := legDSN(t)
	a, b := startPair(t, dsn, "-rate-limit", "50", "-rate-window", "1h")
	pg := openPG(t, dsn)
	a.warm(t, burst/2)
	b.warm(t, burst/2)
	both := []*storefront{a, b}

	rs := parallel(burst, func(i int) reply { return both[i%2].try(http.MethodGet, limited, "") })
	counts := statuses(rs)
	if counts[http.StatusOK] != limit || counts[http.StatusTooManyRequests] != burst-limit || len(counts) != 2 {
		t.Fatalf("%d parallel requests over 2 instances, limit %d: got statuses %v, want %d×200 and %d×429", burst, limit, counts, limit, burst-limit)
	}
	served := [2]int{}
	seen := make(map[int64]bool)
	for i, r := range rs {
		if r.Status != http.StatusOK {
			checkRefusal(t, r, limit, window)
			continue
		}
		served[i%2]++
		h := checkRate(t, r, limit, window)
		if seen[h.Remaining] {
			t.Errorf("X-RateLimit-Remaining %d handed out twice", h.Remaining)
		}
		seen[h.Remaining] = true
	}
	c := pg.onlyCounter(t)
	if c.Count < limit || c.Count > burst || c.WindowMS != window.Milliseconds() {
		t.Errorf("counter row: got %+v, want count %d..%d, window_ms %d", c, limit, burst, window.Milliseconds())
	}
	t.Logf("%d parallel GET %s alternating over 2 instances, limit %d: %v (a served %d, b served %d); counter row count %d",
		burst, limited, limit, counts, served[0], served[1], c.Count)
}

// K duplicates of one keyed checkout in flight at once, alternating between
// the instances: one execution in all, one answer on both.
func TestPostgresDuplicatesAcrossInstances(t *testing.T) {
	t.Parallel()
	const k = 20
	dsn := legDSN(t)
	a, b := startPair(t, dsn, "-checkout-delay", "500ms")
	pg := openPG(t, dsn)
	a.warm(t, k/2)
	b.warm(t, k/2)
	both := []*storefront{a, b}
	key := uuid.NewString()

	ts := inFlight(k, func(i int) reply { return both[i%2].checkout(key, mugOrder) })
	checkOverlap(t, ts)
	owner := checkOneExecution(t, ts)
	checkOrders(t, pg.orders(t), fresh(t, owner))
	ownedBy := "a"
	for i, r := range ts {
		if r.Header.Get(replayedHeader) == "" && i%2 == 1 {
			ownedBy = "b"
		}
	}
	t.Logf("%d duplicates alternating over 2 instances, in flight at once: %v, handler ran once (on %s), %d replays byte-identical; 1 orders row",
		k, statuses(replies(ts)), ownedBy, k-1)
}

// kill -9 the instance whose owner holds a key mid-handler: the duplicate
// parked on the other instance (blocked on the key's advisory lock) is
// released when the server drops the dead owner's connection, and runs the
// handler there, once; a further retry on either instance replays it.
func TestPostgresKill9Owner(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testPostgresKill9Owner)
}

func testPostgresKill9Owner(t *testing.T, durability []string) {
	dsn := legDSN(t)
	a, b := startPair(t, dsn, with(durability, "-checkout-delay", "2s")...)
	pg := openPG(t, dsn)
	key := uuid.NewString()

	onA, onB := make(chan reply, 1), make(chan reply, 1)
	go func() { onA <- a.checkout(key, mugOrder) }() // joined below
	waitFor(t, 10*time.Second, "a holds the key's advisory lock", func() bool { return pg.advisoryLocks(t, a, true) > 0 })
	go func() { onB <- b.checkout(key, mugOrder) }() // joined below
	waitFor(t, 10*time.Second, "b waits for the key's advisory lock", func() bool { return pg.advisoryLocks(t, b, false) > 0 })
	if got := pg.advisoryLocks(t, b, true); got != 0 {
		t.Fatalf("advisory locks b holds while a owns the key: got %d, want 0", got)
	}

	killedAt := time.Now()
	a.kill(t)
	if r := <-onA; r.Err == nil {
		t.Fatalf("the killed owner's request on a: got %s, want no answer (the handler was to take 2s)", r)
	}
	var rb reply
	select {
	case rb = <-onB:
	case <-time.After(20 * time.Second):
		t.Fatalf("the duplicate parked on b: no answer 20s after a was killed")
	}
	id := fresh(t, rb)
	released := time.Since(killedAt)
	checkOrders(t, pg.orders(t), id)

	checkReplay(t, b.checkout(key, mugOrder), rb)
	a2 := startOnPostgres(t, dsn, "a2", durability...)
	checkReplay(t, a2.checkout(key, mugOrder), rb)
	checkOrders(t, pg.orders(t), id)
	t.Logf("a owned the key, b parked on its advisory lock; kill -9 a: b ran the handler (201 order %s, %s after the kill); replays on b and a restarted; 1 orders row",
		id, released.Round(time.Millisecond))
}

// Both instances at the limit, SIGTERM (exit 0), both started again on the
// same DSN: still limited, in the same window.
func TestPostgresRestartStillLimited(t *testing.T) {
	t.Parallel()
	const limit, window = 5, time.Hour
	flags := []string{"-rate-limit", "5", "-rate-window", "1h"}
	dsn := legDSN(t)
	a, b := startPair(t, dsn, flags...)
	pg := openPG(t, dsn)
	both := []*storefront{a, b}
	for i := range limit {
		if r := both[i%2].get(t, limited); r.Status != http.StatusOK {
			t.Fatalf("request %d of %d: got %s, want 200", i+1, limit, r)
		}
	}
	for _, s := range both {
		checkRefusal(t, s.get(t, limited), limit, window)
	}
	a.stop(t)
	b.stop(t)
	before := pg.onlyCounter(t)

	a, b = startPair(t, dsn, flags...)
	for _, s := range []*storefront{a, b} {
		checkRefusal(t, s.get(t, limited), limit, window)
	}
	if after := pg.onlyCounter(t); after.WindowStart != before.WindowStart || after.ExpiresAt != before.ExpiresAt {
		t.Errorf("counter row after restart: got %+v, want the same window as %+v", after, before)
	}
	a.stop(t)
	b.stop(t)
	t.Logf("limit %d reached over 2 instances, both SIGTERM exit 0, both restarted: 429 on each; window_start %d unchanged",
		limit, before.WindowStart)
}

// Connection loss: with every connection to the database cut and new ones
// refused, each request is refused with 503 and Retry-After, never served
// uncounted; once the database is back, requests are served again and a
// key refused meanwhile runs. Every 2xx is in the counter, every 201 in
// orders. The cut is a TCP relay the gate closes, so the server other legs
// share is never touched.
func TestPostgresConnectionLoss(t *testing.T) {
	t.Parallel()
	dsn := legDSN(t)
	proxy, viaProxy := startPGProxy(t, dsn)
	s := startOnPostgres(t, viaProxy, "cut", "-rate-limit", "1000", "-rate-window", "1h")
	pg := openPG(t, dsn)
	served := 0
	if r := s.get(t, limited); r.Status != http.StatusOK {
		t.Fatalf("GET %s before the cut: got %s, want 200", limited, r)
	}
	served++
	ids := []string{fresh(t, s.checkout(uuid.NewString(), mugOrder))}
	served++

	proxy.cut()
	cutKey := uuid.NewString()
	refused := []struct {
		name string
		send func() reply
	}{
		{"GET " + limited, func() reply { return s.try(http.MethodGet, limited, "") }},
		{"GET " + limited + " again", func() reply { return s.try(http.MethodGet, limited, "") }},
		{"POST /checkout", func() reply { return s.checkout(cutKey, mugOrder) }},
		{"POST /checkout, same key", func() reply { return s.checkout(cutKey, mugOrder) }},
	}
	for _, tc := range refused {
		t.Run("cut "+tc.name, func(t *testing.T) {
			r := tc.send()
			if r.Err != nil {
				t.Fatalf("got no answer (%v), want 503", r.Err)
			}
			checkProblem(t, r, http.StatusServiceUnavailable)
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("503 Retry-After: got %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
			}
		})
	}

	// Back: each pool may still hold connections that died in the cut, so
	// a request may meet one and be refused; it must be a 503 with
	// Retry-After, and a retry is served.
	proxy.restore()
	refusedAfter := 0
	untilServed := func(what string, send func() reply, want int) reply {
		t.Helper()
		var r reply
		waitFor(t, 15*time.Second, what+" served again after the database came back", func() bool {
			r = send()
			switch {
			case r.Err == nil && r.Status == want:
				served++
				return true
			case r.Err == nil && r.Status == http.StatusServiceUnavailable:
				if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
					t.Errorf("%s 503 Retry-After: got %q, want whole seconds ≥ 1", what, r.Header.Get("Retry-After"))
				}
				refusedAfter++
				return false
			}
			t.Fatalf("%s after the database came back: got %s, want %d or 503", what, r, want)
			return false
		})
		return r
	}
	untilServed("GET "+limited, func() reply { return s.try(http.MethodGet, limited, "") }, http.StatusOK)
	ids = append(ids, fresh(t, untilServed("POST /checkout with the key refused in the cut",
		func() reply { return s.checkout(cutKey, mugOrder) }, http.StatusCreated)))

	checkOrders(t, pg.orders(t), ids...)
	// Every 2xx was counted; beyond them only requests refused after the
	// database came back may have been (counted, then failed downstream).
	c := pg.onlyCounter(t)
	if c.Count < int64(served) || c.Count > int64(served+refusedAfter) {
		t.Errorf("counter row: got count %d, want %d..%d: every one of the %d×2xx, at most the %d×503 after the cut",
			c.Count, served, served+refusedAfter, served, refusedAfter)
	}
	t.Logf("cut: %d requests each 503 with Retry-After; restored: %d×503 with Retry-After, then served; %d×2xx, counter %d; %d orders rows, the cut key's from its retry",
		len(refused), refusedAfter, served, c.Count, len(ids))
}

// More distinct keys in flight on one instance than it may hold: each owner
// holds a connection (its key's advisory lock) for as long as its handler
// runs, and the handler needs one of the application's for its own queries.
// With -key-conns 4 and 16 keys in flight, the keys beyond 4 must be
// refused at once with 503 and Retry-After, never hang: each is answered in
// time, at least one is refused, and the orders rows are the 201s.
func TestPostgresDistinctKeysBeyondPool(t *testing.T) {
	t.Parallel()
	const k, answerWithin = 16, 10 * time.Second // legDSN: 8 connections
	dsn := legDSN(t)
	s := startOnPostgres(t, dsn, "keys", "-checkout-delay", "200ms", "-key-conns", "4")
	pg := openPG(t, dsn)
	s.warm(t, k)
	s.client.Timeout = answerWithin

	start := time.Now()
	ts := inFlight(k, func(int) reply { return s.checkout(uuid.NewString(), mugOrder) })
	took := time.Since(start)
	checkOverlap(t, ts)
	var ids []string
	for i, r := range ts {
		switch {
		case r.Err != nil:
			t.Errorf("key %d of %d: got no answer within %s (%v), want 201 or 503", i+1, k, answerWithin, r.Err)
		case r.Status == http.StatusCreated:
			ids = append(ids, fresh(t, r.reply))
		case r.Status == http.StatusServiceUnavailable:
			checkProblem(t, r.reply, http.StatusServiceUnavailable)
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("503 Retry-After: got %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
			}
		default:
			t.Errorf("key %d of %d: got %s, want 201 or 503", i+1, k, r.reply)
		}
	}
	if len(ids) == k {
		t.Errorf("all %d keys got 201 with -key-conns 4: the fail-fast path was never reached", k)
	}
	checkOrders(t, pg.orders(t), ids...)
	t.Logf("%d distinct keys in flight with -key-conns 4: %v in %s", k, statuses(replies(ts)), took.Round(time.Millisecond))
}
