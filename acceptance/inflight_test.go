//go:build acceptance

package acceptance

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The in-flight limiter's legs: -inflight-limit N admits exactly N slow
// checkouts of one client at once, on one instance (SQLite) and across
// two (PostgreSQL, Redis), and the slots of an instance killed with
// SIGKILL are free for the others within the documented bound.

const (
	// inflightDelay is how long an admitted checkout works: long enough
	// that every checkout of a burst, sent together on warm connections,
	// arrives while the admitted ones still run.
	inflightDelay = "5s"
	// inflightKillDelay keeps the killed holder's checkouts running far
	// past the bound, so that only the lease can free their slots.
	inflightKillDelay = "5m"
	// inflightFreeBound is the storefront's contract for a dead holder's
	// slots (docs/inflight.md documents 10 s, the default lease).
	inflightFreeBound = 30 * time.Second
	// inflightProblem is the in-flight limiter's refusal.
	inflightProblem = "https://porch.dev/problems/inflight-limited"
)

// inflightRate keeps the rate limiter out of the kill legs' way: they poll
// the surviving instance every readyPoll for up to inflightFreeBound.
var inflightRate = []string{"-rate-limit", "100000"}

// slowCheckouts sends n keyed checkouts at once, spread over instances,
// and returns their replies in order.
func slowCheckouts(n int, instances ...*storefront) []reply {
	return parallel(n, func(i int) reply {
		return instances[i%len(instances)].try(http.MethodPost, "/checkout", `{"sku":"mug","qty":1}`, keyHeader, uuid.NewString())
	})
}

// checkInflightRefusal checks that r is the in-flight limiter's 429: its
// problem type, Retry-After, and the concurrent-requests RateLimit fields.
func checkInflightRefusal(t *testing.T, r reply, limit string) {
	t.Helper()
	var p struct{ Type string }
	if err := json.Unmarshal(r.Body, &p); err != nil || p.Type != inflightProblem {
		t.Errorf("refusal body %s: want problem type %s", r.Body, inflightProblem)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("refusal without Retry-After: %v", r.Header)
	}
	policy := strings.Join(r.Header.Values("RateLimit-Policy"), ", ")
	if want := `"inflight";q=` + limit + `;qu="concurrent-requests"`; !strings.Contains(policy, want) {
		t.Errorf("RateLimit-Policy %q, want it to hold %s", policy, want)
	}
	if rl := strings.Join(r.Header.Values("RateLimit"), ", "); !strings.Contains(rl, `"inflight";r=0`) {
		t.Errorf("RateLimit %q, want it to hold \"inflight\";r=0", rl)
	}
}

// inflightBurstExact sends n slow checkouts over instances and checks exactly
// limit were served and the rest refused by the in-flight limiter.
func inflightBurstExact(t *testing.T, n, limit int, limitFlag string, instances ...*storefront) {
	t.Helper()
	for _, s := range instances {
		s.warm(t, n)
	}
	rs := slowCheckouts(n, instances...)
	counts := statuses(rs)
	// A refusal may be a 503 with Retry-After: a shared store slow on a
	// loaded machine fails the acquire closed. It must not take the
	// place of an admission: exactly limit are served.
	refused := counts[http.StatusTooManyRequests] + counts[http.StatusServiceUnavailable]
	if counts[http.StatusCreated] != limit || refused != n-limit || counts[http.StatusTooManyRequests] == 0 {
		t.Fatalf("%d slow checkouts at once over %d instance(s) with -inflight-limit %d: statuses %v, want %d×201 and %d×429",
			n, len(instances), limit, counts, limit, n-limit)
	}
	for _, r := range rs {
		switch r.Status {
		case http.StatusTooManyRequests:
			checkInflightRefusal(t, r, limitFlag)
		case http.StatusServiceUnavailable:
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("a 503 without Retry-After: %v", r)
			}
		}
	}
	// Every slot was given back with its response: one more is served.
	if r := instances[0].post(t, "/checkout", `{"sku":"mug","qty":1}`, keyHeader, uuid.NewString()); r.Status != http.StatusCreated {
		t.Fatalf("a checkout after the burst: %v, want 201 (a slot was not given back)", r)
	}
	t.Logf("%d slow checkouts at once over %d instance(s), -inflight-limit %d: %v; then one more 201", n, len(instances), limit, counts)
}

// Six slow checkouts at once from one client on one SQLite instance with
// -inflight-limit 2: exactly two 201 and four 429.
func TestInflightSQLite(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-inflight-limit", "2", "-checkout-delay", inflightDelay)
	inflightBurstExact(t, 6, 2, "2", s)
	s.stop(t)
}

// Eight slow checkouts over two PostgreSQL instances with -inflight-limit
// 3: exactly three 201.
func TestInflightPostgres(t *testing.T) {
	t.Parallel()
	a, b := startPair(t, legDSN(t), "-inflight-limit", "3", "-checkout-delay", inflightDelay)
	inflightBurstExact(t, 8, 3, "3", a, b)
}

// Eight slow checkouts over two Redis-backed instances with
// -inflight-limit 3: exactly three 201.
func TestInflightRedis(t *testing.T) {
	t.Parallel()
	flags := append(sharedRedis(t), "-inflight-limit", "3", "-checkout-delay", inflightDelay)
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)
	inflightBurstExact(t, 8, 3, "3", a, b)
}

// killHolder has a hold every slot of the client with slow checkouts,
// checks b refuses the client while they run, kills a with SIGKILL, and
// checks b serves the client again within the bound. a must run with
// -metrics-addr: b's probe takes a slot of the client itself, so it waits
// until a holds all of them (porch_inflight_held), lest a probe racing
// a's checkouts take the place of one of them.
func killHolder(t *testing.T, a, b *storefront) {
	t.Helper()
	const limit = 3
	done := make(chan []reply, 1)
	go func() { done <- slowCheckouts(limit, a) }() // joined below: they end when a dies
	deadline := time.Now().Add(startTimeout)
	for {
		if got := a.scrape(t)[`porch_inflight_held{limiter="inflight"}`]; got == limit {
			break
		}
		select {
		case rs := <-done:
			// a's checkouts ended (or never ran) before holding their
			// slots: say how, rather than wait for the deadline.
			t.Fatalf("a's %d slow checkouts were answered before they held their slots: statuses %v, first %v", limit, statuses(rs), rs[0])
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's %d slow checkouts did not all hold a slot within %s", limit, startTimeout)
		}
		time.Sleep(readyPoll) // polling for a's checkouts to take their slots
	}
	for {
		r := b.get(t, "/products")
		if r.Status == http.StatusTooManyRequests {
			checkInflightRefusal(t, r, "3")
			break
		}
		// A 503 with Retry-After is a store slow on a loaded machine,
		// failing closed: ask again.
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || time.Now().After(deadline) {
			t.Fatalf("b while a's %d checkouts hold every slot: %v, want the in-flight limiter's 429", limit, r)
		}
		time.Sleep(readyPoll)
	}
	a.kill(t)
	killed := time.Now()
	<-done
	for {
		r := b.get(t, "/products")
		if r.Status == http.StatusOK {
			break
		}
		// A store that fails a request closed (503 with Retry-After: the
		// shared store slow on a loaded machine) says nothing of the
		// slots; anything else but the in-flight 429 is wrong.
		unavailable := r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != ""
		if !unavailable && (r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), inflightProblem)) {
			t.Fatalf("b after the kill: %v, want the in-flight limiter's 429 until the slots are free, then 200", r)
		}
		if time.Since(killed) > inflightFreeBound {
			t.Fatalf("the killed holder's slots were still held %s after SIGKILL, want free within %s", time.Since(killed), inflightFreeBound)
		}
		time.Sleep(readyPoll) // polling the store's lease expiry
	}
	t.Logf("the killed holder's %d slots were free for the other instance %s after SIGKILL (bound %s)", limit, time.Since(killed).Round(time.Millisecond), inflightFreeBound)
}

// On PostgreSQL, the slots of an instance killed with SIGKILL while its
// checkouts run are free for the other instance within the bound.
func TestInflightKill9Postgres(t *testing.T) {
	t.Parallel()
	a, b := startPair(t, legDSN(t), append([]string{"-inflight-limit", "3", "-checkout-delay", inflightKillDelay, "-metrics-addr", "127.0.0.1:0"}, inflightRate...)...)
	killHolder(t, a, b)
}

// On Redis likewise.
func TestInflightKill9Redis(t *testing.T) {
	t.Parallel()
	flags := append(sharedRedis(t), append([]string{"-inflight-limit", "3", "-checkout-delay", inflightKillDelay, "-metrics-addr", "127.0.0.1:0"}, inflightRate...)...)
	a := startStorefront(t, newDB(t), flags...)
	b := startStorefront(t, newDB(t), flags...)
	killHolder(t, a, b)
}
