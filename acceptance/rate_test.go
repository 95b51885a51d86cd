//go:build acceptance

package acceptance

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The route every rate leg drives; every route but /healthz is limited.
const limited = "/products"

// rateHeaders are the limiter's response headers, parsed.
type rateHeaders struct {
	Limit, Remaining, Reset int64 // X-RateLimit-*; Reset in Unix seconds
	R, T                    int64 // RateLimit: r (remaining), t (seconds to reset)
}

// checkRate parses r's rate-limit headers and fails the test unless all five
// are present and consistent with a limit of limit per window: the
// X-RateLimit triple, RateLimit-Policy naming the same limit and window, and
// RateLimit whose r equals X-RateLimit-Remaining and whose t lies within the
// window.
func checkRate(t *testing.T, r reply, limit int, window time.Duration) rateHeaders {
	t.Helper()
	var h rateHeaders
	num := func(name string) int64 {
		t.Helper()
		v := r.Header.Get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%d response: %s: got %q, want an integer (%s)", r.Status, name, v, r)
		}
		return n
	}
	h.Limit, h.Remaining, h.Reset = num("X-RateLimit-Limit"), num("X-RateLimit-Remaining"), num("X-RateLimit-Reset")
	windowSecs := int64((window + time.Second - 1) / time.Second)
	if h.Limit != int64(limit) {
		t.Errorf("X-RateLimit-Limit: got %d, want %d", h.Limit, limit)
	}
	if h.Remaining < 0 || h.Remaining > int64(limit) {
		t.Errorf("X-RateLimit-Remaining: got %d, want 0..%d", h.Remaining, limit)
	}
	if got, want := r.Header.Get("RateLimit-Policy"), fmt.Sprintf(`"default";q=%d;w=%d`, limit, windowSecs); got != want {
		t.Errorf("RateLimit-Policy: got %q, want %q", got, want)
	}
	name, params, err := parseItem(r.Header.Get("RateLimit"))
	if err != nil || name != `"default"` {
		t.Fatalf("RateLimit: got %q, want \"default\";r=<n>;t=<n> (%v)", r.Header.Get("RateLimit"), err)
	}
	var okR, okT bool
	h.R, okR = params["r"]
	h.T, okT = params["t"]
	if !okR || !okT {
		t.Fatalf("RateLimit: got %q, want both r and t", r.Header.Get("RateLimit"))
	}
	if h.R != h.Remaining {
		t.Errorf("RateLimit r: got %d, want X-RateLimit-Remaining %d", h.R, h.Remaining)
	}
	if h.T < 0 || h.T > windowSecs {
		t.Errorf("RateLimit t: got %d, want 0..%d", h.T, windowSecs)
	}
	return h
}

// parseItem parses a structured-field item with integer parameters, such as
// `"default";r=4;t=60`.
func parseItem(s string) (name string, params map[string]int64, err error) {
	parts := strings.Split(s, ";")
	params = make(map[string]int64)
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return "", nil, fmt.Errorf("parameter %q has no value", p)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", nil, fmt.Errorf("parameter %q: %w", p, err)
		}
		params[k] = n
	}
	return strings.TrimSpace(parts[0]), params, nil
}

// checkRefusal fails unless r is the limiter's 429: problem+json, rate
// headers with nothing remaining, and a Retry-After of whole seconds until
// the window closes (at least 1, at most the window, and within a second of
// RateLimit's t).
func checkRefusal(t *testing.T, r reply, limit int, window time.Duration) rateHeaders {
	t.Helper()
	checkProblem(t, r, http.StatusTooManyRequests)
	h := checkRate(t, r, limit, window)
	if h.Remaining != 0 {
		t.Errorf("429 X-RateLimit-Remaining: got %d, want 0", h.Remaining)
	}
	ra, err := strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
	windowSecs := int64((window + time.Second - 1) / time.Second)
	switch {
	case err != nil:
		t.Errorf("429 Retry-After: got %q, want whole seconds", r.Header.Get("Retry-After"))
	case ra < 1 || ra > windowSecs:
		t.Errorf("429 Retry-After: got %d, want 1..%d", ra, windowSecs)
	case ra < h.T-1 || ra > max(h.T, 1)+1:
		t.Errorf("429 Retry-After: got %d, want about RateLimit t=%d", ra, h.T)
	}
	return h
}

// checkResetNear fails unless the Unix-seconds reset lies within slack of
// want.
func checkResetNear(t *testing.T, reset int64, want time.Time, slack time.Duration) {
	t.Helper()
	got := time.Unix(reset, 0)
	if d := got.Sub(want); d < -slack || d > slack {
		t.Errorf("X-RateLimit-Reset: got %d (%s), want within %s of %d (%s)",
			reset, got.UTC().Format(time.TimeOnly), slack, want.Unix(), want.UTC().Format(time.TimeOnly))
	}
}

// exhaust sends limit sequential requests and fails unless every one is
// served with Remaining counting down from limit-1 to 0 and one Reset. It
// returns the last response's headers.
func exhaust(t *testing.T, s *storefront, limit int, window time.Duration) rateHeaders {
	t.Helper()
	var first, h rateHeaders
	for i := range limit {
		r := s.get(t, limited)
		if r.Status != http.StatusOK {
			t.Fatalf("request %d of %d: got %s, want 200", i+1, limit, r)
		}
		h = checkRate(t, r, limit, window)
		if want := int64(limit - 1 - i); h.Remaining != want {
			t.Errorf("request %d X-RateLimit-Remaining: got %d, want %d", i+1, h.Remaining, want)
		}
		if i == 0 {
			first = h
		} else if h.Reset != first.Reset {
			t.Errorf("request %d X-RateLimit-Reset: got %d, want %d as on request 1 (same window)", i+1, h.Reset, first.Reset)
		}
	}
	return h
}

// A limit of N: N+1 requests, exactly N served, the last refused with a
// retry hint, and the headers consistent on every response.
func TestRateLimitExact(t *testing.T) {
	t.Parallel()
	const limit, window = 5, time.Minute
	s := startStorefront(t, newDB(t), "-rate-limit", "5", "-rate-window", "1m")

	start := time.Now()
	h := exhaust(t, s, limit, window)
	checkResetNear(t, h.Reset, start.Add(window), 2*time.Second)
	last := checkRefusal(t, s.get(t, limited), limit, window)
	if last.Reset != h.Reset {
		t.Errorf("429 X-RateLimit-Reset: got %d, want %d as on the served requests", last.Reset, h.Reset)
	}
	checkResetNear(t, last.Reset, time.Now().Add(time.Duration(last.T)*time.Second), 2*time.Second)
	if c := onlyCounter(t, s.db); c.Count != limit || c.WindowMS != window.Milliseconds() || c.ExpiresAt != c.WindowStart+c.WindowMS {
		t.Errorf("counter row: got %+v, want count %d, window_ms %d, expires_at = window_start + window_ms", c, limit, window.Milliseconds())
	}
	t.Logf("%d requests: %d×200 (remaining %d..0), then 429 with Retry-After; reset %d", limit+1, limit, limit-1, h.Reset)
}

// X-RateLimit-Reset names one instant per window, however long the store
// takes to commit: with every commit taking a second, the served responses
// and the refusal after them must still agree (a reset computed as "wall
// clock when the header is written + time left when the verdict was made"
// drifts by the commit latency).
func TestRateResetStableOnSlowDisk(t *testing.T) {
	t.Parallel()
	const limit, window = 2, time.Hour
	s := startStorefront(t, newDB(t), "-rate-limit", "2", "-rate-window", "1h", "-store-delay", "1s")
	h := exhaust(t, s, limit, window)
	last := checkRefusal(t, s.get(t, limited), limit, window)
	if last.Reset != h.Reset {
		t.Errorf("X-RateLimit-Reset: got %d on the served requests and %d on the refusal, want one instant for the window", h.Reset, last.Reset)
	}
}

// Counters at the limit, SIGTERM, restart on the same file: still limited,
// in the same window.
func TestRateRestartAfterSIGTERM(t *testing.T) {
	t.Parallel()
	const limit, window = 5, time.Hour
	flags := []string{"-rate-limit", "5", "-rate-window", "1h"}
	a := startStorefront(t, newDB(t), flags...)
	h := exhaust(t, a, limit, window)
	checkRefusal(t, a.get(t, limited), limit, window)
	a.stop(t)
	before := onlyCounter(t, a.db)
	if before.Count != limit {
		t.Fatalf("counter row after SIGTERM: got count %d, want %d", before.Count, limit)
	}

	b := startStorefront(t, a.db, flags...)
	got := checkRefusal(t, b.get(t, limited), limit, window)
	if d := got.Reset - h.Reset; d < -1 || d > 1 {
		t.Errorf("X-RateLimit-Reset after restart: got %d, want %d (the same window)", got.Reset, h.Reset)
	}
	b.stop(t)
	if after := onlyCounter(t, a.db); after != before {
		t.Errorf("counter row after restart: got %+v, want it unchanged %+v", after, before)
	}
	t.Logf("limit %d reached, SIGTERM exit 0, restart: 429, row %+v", limit, before)
}

// kill -9 under a concurrent stream: every 2xx the clients received is in
// the counter row after restart, and the total served never exceeds the
// limit. The stored count may run ahead of the true one by the limiter's
// write-ahead (stated here as a flag), so a crash over-counts by at most
// that plus the requests in flight: the safe side, and bounded.
func TestRateKill9UnderLoad(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testRateKill9UnderLoad)
}

func testRateKill9UnderLoad(t *testing.T, durability []string) {
	const limit, window = 5000, time.Hour
	const workers, killAfter, writeAhead = 32, 1500, 64
	flags := with(durability, "-rate-limit", "5000", "-rate-window", "1h", "-rate-write-ahead", strconv.Itoa(writeAhead))
	a := startStorefront(t, newDB(t), flags...)

	var served atomic.Int64
	var failures sync.Map // worker → the reply that should not have happened
	reached, killing := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				select {
				case <-killing:
					return
				default:
				}
				r := a.try(http.MethodGet, limited, "")
				switch {
				case r.Err != nil:
					select {
					case <-killing: // cut off by the kill, as intended
					default:
						failures.Store(w, r)
					}
					return
				case r.Status != http.StatusOK:
					failures.Store(w, r)
					return
				}
				if served.Add(1) >= killAfter {
					once.Do(func() { close(reached) })
				}
			}
		})
	}
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Errorf("only %d of %d requests served within a minute", served.Load(), killAfter)
	}
	close(killing)
	a.kill(t)
	wg.Wait()
	failures.Range(func(w, r any) bool {
		t.Errorf("worker %d before the kill: got %v, want 200", w, r)
		return true
	})
	if t.Failed() {
		return
	}
	got2xx := served.Load()

	b := startStorefront(t, a.db, flags...)
	c := onlyCounter(t, a.db)
	if c.Count < got2xx {
		t.Errorf("counter after kill -9: got %d, want at least the %d requests answered 2xx", c.Count, got2xx)
	}
	if c.Count > got2xx+workers+writeAhead {
		t.Errorf("counter after kill -9: got %d, want at most %d answered + %d in flight + %d written ahead", c.Count, got2xx, workers, writeAhead)
	}

	after := drain(t, b, 16)
	if want := limit - c.Count; after != want {
		t.Errorf("served after restart: got %d, want limit %d - counter %d = %d", after, limit, c.Count, want)
	}
	if total := got2xx + after; total > limit {
		t.Errorf("served in all: got %d, want at most %d", total, limit)
	}
	t.Logf("kill -9 after %d×2xx (%d in flight); row after restart %d; then %d more served; %d of %d in all",
		got2xx, workers, c.Count, after, got2xx+after, limit)
}

// drain sends GET requests from workers goroutines until each has been
// refused, failing on anything but 200 and 429, and returns how many were
// served.
func drain(t *testing.T, s *storefront, workers int) int64 {
	t.Helper()
	var served atomic.Int64
	for _, bad := range parallel(workers, func(int) *reply {
		for {
			r := s.try(http.MethodGet, limited, "")
			switch {
			case r.Err == nil && r.Status == http.StatusOK:
				served.Add(1)
			case r.Err == nil && r.Status == http.StatusTooManyRequests:
				return nil
			default:
				return &r
			}
		}
	}) {
		if bad != nil {
			t.Fatalf("draining the limit: got %s, want 200 or 429", bad)
		}
	}
	return served.Load()
}

// A restart with the wall clock an hour behind grants no extra allowance:
// the window is measured on a timeline anchored at the newest persisted
// window, while X-RateLimit-Reset still follows the (shifted) wall clock.
func TestRateWallClockBack(t *testing.T) {
	t.Parallel()
	const limit, window = 3, time.Minute
	flags := []string{"-rate-limit", "3", "-rate-window", "1m"}
	a := startStorefront(t, newDB(t), flags...)
	h := exhaust(t, a, limit, window)
	a.stop(t)
	before := onlyCounter(t, a.db)

	b := startStorefront(t, a.db, append(flags, "-wall-offset=-1h")...)
	r := b.get(t, limited)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("after restart with the wall clock 1h back: got %s, want 429", r)
	}
	got := checkRefusal(t, r, limit, window)
	// The reset is on the process's wall clock: an hour earlier than before.
	checkResetNear(t, got.Reset, time.Unix(h.Reset, 0).Add(-time.Hour), 2*time.Second)
	if after := onlyCounter(t, a.db); after != before {
		t.Errorf("counter row: got %+v, want it unchanged %+v", after, before)
	}
	t.Logf("limit %d reached, restart with -wall-offset=-1h: 429, reset %d → %d", limit, h.Reset, got.Reset)
}

// A fully elapsed window: the client is served again, and the row was reset
// on that access (count 1, a newer window_start), as read from the table.
func TestRateWindowElapsed(t *testing.T) {
	t.Parallel()
	const limit, window = 3, 2 * time.Second
	s := startStorefront(t, newDB(t), "-rate-limit", "3", "-rate-window", "2s")

	start := time.Now()
	exhaust(t, s, limit, window)
	old := onlyCounter(t, s.db)
	if old.Count != limit || old.WindowMS != window.Milliseconds() {
		t.Fatalf("counter row: got %+v, want count %d, window_ms %d", old, limit, window.Milliseconds())
	}

	// Poll until served: a refusal writes nothing, so polling is harmless.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	refused := 0
	var r reply
	for r = s.get(t, limited); r.Status != http.StatusOK; r = s.get(t, limited) {
		checkRefusal(t, r, limit, window)
		refused++
		if time.Since(start) > window+10*time.Second {
			t.Fatalf("still refused %s after the window opened: %s", time.Since(start).Round(time.Millisecond), r)
		}
		<-tick.C
	}
	waited := time.Since(start)
	if waited < window {
		t.Errorf("served again %s after the window opened, want not before %s", waited, window)
	}
	if h := checkRate(t, r, limit, window); h.Remaining != limit-1 {
		t.Errorf("first request of the new window X-RateLimit-Remaining: got %d, want %d", h.Remaining, limit-1)
	}
	now := onlyCounter(t, s.db)
	if now.Count != 1 || now.WindowStart < old.WindowStart+old.WindowMS || now.ExpiresAt != now.WindowStart+now.WindowMS {
		t.Errorf("counter row after the window elapsed: got %+v, want count 1, window_start ≥ %d, expires_at = window_start + window_ms (was %+v)",
			now, old.WindowStart+old.WindowMS, old)
	}
	t.Logf("window %s: %d refusals, served again after %s; row reset to count %d, window_start +%dms",
		window, refused, waited.Round(time.Millisecond), now.Count, now.WindowStart-old.WindowStart)
}

// M concurrent requests for one key: exactly N served, each count handed
// out once. M is 1,000, the burst the default pool and mailbox must absorb
// for one key without a 503.
func TestRateConcurrentExact(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 50, 1000, time.Hour
	s := startStorefront(t, newDB(t), "-rate-limit", "50", "-rate-window", "1h")
	s.warm(t, burst)

	rs := parallel(burst, func(int) reply { return s.try(http.MethodGet, limited, "") })
	counts := statuses(rs)
	if counts[http.StatusOK] != limit || counts[http.StatusTooManyRequests] != burst-limit || len(counts) != 2 {
		t.Fatalf("%d parallel requests, limit %d: got statuses %v, want %d×200 and %d×429", burst, limit, counts, limit, burst-limit)
	}
	seen := make(map[int64]bool)
	for _, r := range rs {
		h := checkRate(t, r, limit, window)
		if r.Status == http.StatusOK {
			if seen[h.Remaining] {
				t.Errorf("X-RateLimit-Remaining %d handed out twice", h.Remaining)
			}
			seen[h.Remaining] = true
		} else {
			checkRefusal(t, r, limit, window)
		}
	}
	if c := onlyCounter(t, s.db); c.Count != limit {
		t.Errorf("counter row: got count %d, want %d", c.Count, limit)
	}
	t.Logf("%d parallel requests, limit %d: %v", burst, limit, counts)
}

// A saturated pool fails closed: a parallel burst against one actor with a
// one-job mailbox and a slow disk earns 503s with Retry-After, and the
// served total over the burst and the sequential requests after it is still
// exactly N.
func TestRateSaturatedFailsClosed(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 5, 64, time.Hour
	// -rate-write-ahead -1 writes every hit, so the one actor blocks on the
	// full one-write committer queue while a 200 ms commit runs, and the
	// burst overflows its mailbox however it is scheduled. With write-ahead
	// the actor answers covered hits without a write, and a burst that
	// trickles in on a busy machine never saturates it.
	s := startStorefront(t, newDB(t), "-rate-limit", "5", "-rate-window", "1h",
		"-pool", "1", "-mailbox", "1", "-store-delay", "200ms", "-rate-write-ahead", "-1")
	s.warm(t, burst)

	rs := parallel(burst, func(int) reply { return s.try(http.MethodGet, limited, "") })
	counts := statuses(rs)
	if counts[http.StatusServiceUnavailable] == 0 || counts[http.StatusOK] > limit ||
		counts[http.StatusOK]+counts[http.StatusTooManyRequests]+counts[http.StatusServiceUnavailable] != burst {
		t.Fatalf("%d parallel requests on a saturated pool: got statuses %v, want some 503, at most %d×200, nothing but 200/429/503", burst, counts, limit)
	}
	for _, r := range rs {
		if r.Status == http.StatusServiceUnavailable {
			checkProblem(t, r, http.StatusServiceUnavailable)
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("503 Retry-After: got %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
			}
		}
	}

	servedAfter := 0
	for i := 0; ; i++ {
		r := s.get(t, limited)
		if r.Status == http.StatusTooManyRequests {
			checkRefusal(t, r, limit, window)
			break
		}
		if r.Status != http.StatusOK || i > limit {
			t.Fatalf("sequential request %d after the burst: got %s, want 200 until the limit, then 429", i+1, r)
		}
		servedAfter++
	}
	if total := counts[http.StatusOK] + servedAfter; total != limit {
		t.Errorf("served over the burst (%d) and after it (%d): got %d, want exactly %d", counts[http.StatusOK], servedAfter, total, limit)
	}
	if c := onlyCounter(t, s.db); c.Count != limit {
		t.Errorf("counter row: got count %d, want %d", c.Count, limit)
	}
	t.Logf("burst of %d on -pool 1 -mailbox 1 -store-delay 200ms: %v; then %d×200 and 429", burst, counts, servedAfter)
}

// /healthz is never rate limited and carries no rate headers.
func TestHealthzNotLimited(t *testing.T) {
	t.Parallel()
	const limit, window = 2, time.Hour
	s := startStorefront(t, newDB(t), "-rate-limit", "2", "-rate-window", "1h")
	check := func(rs []reply) {
		t.Helper()
		for _, r := range rs {
			if r.Err != nil || r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("GET /healthz: got %s with X-RateLimit-Limit %q, want 200 and no rate headers", r, r.Header.Get("X-RateLimit-Limit"))
			}
		}
	}
	check(parallel(10*limit, func(int) reply { return s.try(http.MethodGet, "/healthz", "") }))
	exhaust(t, s, limit, window)
	checkRefusal(t, s.get(t, limited), limit, window)
	check([]reply{s.get(t, "/healthz")})
	if c := onlyCounter(t, s.db); c.Count != limit {
		t.Errorf("counter row: got count %d, want %d (healthz not counted)", c.Count, limit)
	}
}

// With trust-proxy off, X-Forwarded-For is not read: a client that forges a
// new one on every request is still one client.
func TestRateForgedXFFIgnored(t *testing.T) {
	t.Parallel()
	const limit, window = 3, time.Hour
	s := startStorefront(t, newDB(t), "-rate-limit", "3", "-rate-window", "1h")
	for i := range limit + 1 {
		r := s.get(t, limited, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
		if i < limit && r.Status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i+1, r)
		}
		if i == limit {
			checkRefusal(t, r, limit, window)
		}
	}
	c := onlyCounter(t, s.db)
	if !strings.HasSuffix(c.Key, "127.0.0.1") || c.Count != limit {
		t.Errorf("counter row: got %+v, want the peer 127.0.0.1 counted %d times", c, limit)
	}
}

// With -trust-proxy (one trusted hop), the client is the X-Forwarded-For
// entry that proxy appended: distinct values are distinct counters, IPv6
// clients share one per /64, and an entry forged to its left is ignored.
func TestRateTrustProxy(t *testing.T) {
	t.Parallel()
	const limit, window = 2, time.Hour
	s := startStorefront(t, newDB(t), "-rate-limit", "2", "-rate-window", "1h", "-trust-proxy")
	steps := []struct {
		xff  string
		want int
	}{
		{"203.0.113.1", http.StatusOK},
		{"203.0.113.1", http.StatusOK},
		{"203.0.113.1", http.StatusTooManyRequests},
		{"203.0.113.2", http.StatusOK},
		{"198.51.100.9, 203.0.113.1", http.StatusTooManyRequests}, // the forged left entry is not the client
		{"", http.StatusOK},                                       // no header: the peer
		{"2001:db8::1", http.StatusOK},
		{"2001:db8::2", http.StatusOK},
		{"2001:db8::3", http.StatusTooManyRequests}, // same /64
		{"2001:db8:0:1::1", http.StatusOK},
	}
	for i, st := range steps {
		var hdr []string
		if st.xff != "" {
			hdr = []string{"X-Forwarded-For", st.xff}
		}
		r := s.get(t, limited, hdr...)
		if r.Status != st.want {
			t.Errorf("step %d, X-Forwarded-For %q: got %s, want %d", i+1, st.xff, r, st.want)
			continue
		}
		checkRate(t, r, limit, window)
	}
	want := map[string]int64{"203.0.113.1": 2, "203.0.113.2": 1, "127.0.0.1": 1, "2001:db8::/64": 2, "2001:db8:0:1::/64": 1}
	rows := counters(t, s.db)
	if len(rows) != len(want) {
		t.Errorf("porch_rate_counters: got %d rows %+v, want %d", len(rows), rows, len(want))
	}
	for _, c := range rows {
		matched := false
		for client, n := range want {
			if strings.HasSuffix(c.Key, ":"+client) {
				matched = true
				if c.Count != n {
					t.Errorf("counter %s: got %d, want %d", c.Key, c.Count, n)
				}
			}
		}
		if !matched {
			t.Errorf("unexpected counter row %+v", c)
		}
	}
}
