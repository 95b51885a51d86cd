package rate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// noCounters is a store that keeps no rate counters: it implements neither
// driver.ExclusiveCounters nor driver.SharedCounters.
type noCounters struct{ driver.Counters }

// A programming error in New's arguments panics at construction, with a
// message that names it, before any I/O; it is never found by a request.
func TestNewPanicsOnBadConfig(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{Size: 1})
	t.Cleanup(func() { pool.Close(context.Background()) })

	tests := []struct {
		name      string
		pool      *porch.Pool
		st        driver.Counters
		limit     int
		window    time.Duration
		optName   string // Options.Name
		wantPanic string // a part of the message, after "rate: "
	}{
		{"nil pool", nil, st, 10, time.Minute, "", "non-nil pool"},
		{"nil store", pool, nil, 10, time.Minute, "", "non-nil store"},
		{"nil pointer store", pool, (*sqlite.Store)(nil), 10, time.Minute, "", "non-nil store"},
		{"store without counters", pool, noCounters{st}, 10, time.Minute, "", "store with counters"},
		{"zero limit", pool, st, 0, time.Minute, "", "limit >= 1"},
		{"negative limit", pool, st, -1, time.Minute, "", "limit >= 1"},
		{"zero window", pool, st, 10, 0, "", "window >= 1ms"},
		{"sub-millisecond window", pool, st, 10, time.Microsecond, "", "window >= 1ms"},
		// Near int64's range count+n wraps negative and serves past the
		// limit; near Duration's, the Retry-After sums do.
		{"limit above MaxLimit", pool, st, rate.MaxLimit + 1, time.Minute, "", "limit <= rate.MaxLimit"},
		{"limit near int64's range", pool, st, 1 << 62, time.Minute, "", "limit <= rate.MaxLimit"},
		{"window above MaxWindow", pool, st, 10, rate.MaxWindow + time.Nanosecond, "", "window <= rate.MaxWindow"},
		{"window near Duration's range", pool, st, 10, math.MaxInt64, "", "window <= rate.MaxWindow"},
		// "a:p" would write the rows of limiter "a"'s principals.
		{"name with a colon", pool, st, 10, time.Minute, "a:p", "Options.Name"},
		{"name with a quote", pool, st, 10, time.Minute, `a"b`, "Options.Name"},
		{"name with a backslash", pool, st, 10, time.Minute, `a\b`, "Options.Name"},
		{"name with a newline", pool, st, 10, time.Minute, "a\nb", "Options.Name"},
		{"name not ASCII", pool, st, 10, time.Minute, "café", "Options.Name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "rate: ") || !strings.Contains(msg, tt.wantPanic) {
					t.Errorf("got panic %q, want one prefixed %q that says %q", msg, "rate: ", tt.wantPanic)
				}
			}()
			rate.New(tt.pool, tt.st, tt.limit, tt.window, rate.Options{Name: tt.optName})
		})
	}
	// The panics came before New claimed a policy: a limiter of the default
	// Name and another policy is not refused.
	lim, err := rate.New(pool, st, 99, time.Hour, rate.Options{})
	if err != nil {
		t.Fatalf("after the panics: got %v, want no policy claimed", err)
	}
	lim.Close(context.Background())
}

// TestLimit sends N+1 requests through each wiring, letting time pass on the
// fake clock between them, and checks every header of every response.
func TestLimit(t *testing.T) {
	const limit, window = 3, time.Minute
	steps := []struct {
		after         time.Duration // clock advance before the request
		wantStatus    int
		wantRemaining int
		wantLeft      int // seconds left in the window
	}{
		{0, http.StatusOK, 2, 60},
		{10 * time.Second, http.StatusOK, 1, 50},
		{15 * time.Second, http.StatusOK, 0, 35},
		{0, http.StatusTooManyRequests, 0, 35},
	}
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, limit, window, rigOptions{})
			h := &counted{}
			srv := httptest.NewServer(w.wrap(rg.lim, h))
			t.Cleanup(srv.Close)

			for i, step := range steps {
				rg.clock.Advance(step.after)
				res, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != step.wantStatus {
					t.Fatalf("request %d: got status %d, want %d", i+1, res.StatusCode, step.wantStatus)
				}
				wantHeaders := map[string]string{
					"X-RateLimit-Limit":     strconv.Itoa(limit),
					"X-RateLimit-Remaining": strconv.Itoa(step.wantRemaining),
					"X-RateLimit-Reset":     strconv.FormatInt(t0.Add(window).Unix(), 10),
					"RateLimit-Policy":      `"default";q=3;w=60`,
					"RateLimit":             fmt.Sprintf(`"default";r=%d;t=%d`, step.wantRemaining, step.wantLeft),
				}
				if step.wantStatus == http.StatusTooManyRequests {
					wantProblem(t, res, body, http.StatusTooManyRequests, rate.ProblemLimited)
					// The time left in this key's window, not a whole window.
					wantHeaders["Retry-After"] = strconv.Itoa(step.wantLeft)
				} else if string(body) != "ok" {
					t.Errorf("request %d: got body %q, want %q", i+1, body, "ok")
				}
				for k, want := range wantHeaders {
					if got := res.Header.Get(k); got != want {
						t.Errorf("request %d: got %s %q, want %q", i+1, k, got, want)
					}
				}
			}
			if got := h.runs.Load(); got != limit {
				t.Errorf("got handler run %d times, want %d", got, limit)
			}
		})
	}
}

func TestHeadersRoundUp(t *testing.T) {
	const window = 10 * time.Second
	tests := []struct {
		name          string
		start         time.Time     // the wall clock at the first request
		wait          time.Duration // before the refused second request
		wantRetry     string
		wantReset     time.Time
		wantRateLimit string
	}{
		{"half a second left", t0, 9*time.Second + 500*time.Millisecond, "1", t0.Add(window), `"default";r=0;t=1`},
		{"wall clock mid-second", t0.Add(300 * time.Millisecond), 0, "10", t0.Add(11 * time.Second), `"default";r=0;t=10`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, 1, window, rigOptions{clock: porchtest.NewFakeClock(tt.start)})
			h := rg.lim.Handler(&counted{})
			serve(h, request("192.0.2.1:1"))
			rg.clock.Advance(tt.wait)
			res, _ := serve(h, request("192.0.2.1:1"))
			if got := res.Header.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("got Retry-After %q, want %q", got, tt.wantRetry)
			}
			// The window is not over before this second: round up.
			if got, want := res.Header.Get("X-RateLimit-Reset"), strconv.FormatInt(tt.wantReset.Unix(), 10); got != want {
				t.Errorf("got X-RateLimit-Reset %q, want %q", got, want)
			}
			if got := res.Header.Get("RateLimit"); got != tt.wantRateLimit {
				t.Errorf("got RateLimit %q, want %q", got, tt.wantRateLimit)
			}
		})
	}
}

func TestExactUnderParallelism(t *testing.T) {
	const limit, clients = 100, 1000
	rg := newRig(t, limit, time.Minute, rigOptions{})
	key := rg.lim.CounterKey(request("192.0.2.7:4000"))

	start := make(chan struct{})
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			<-start
			v, err := rg.lim.AllowKey(context.Background(), key)
			switch {
			case err != nil:
				t.Errorf("allow: %v", err)
			case v.Allowed:
				allowed.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	if got := allowed.Load(); got != limit {
		t.Errorf("got %d allowed, want exactly %d", got, limit)
	}
	if got := refused.Load(); got != clients-limit {
		t.Errorf("got %d refused, want %d", got, clients-limit)
	}
	if got, _, _ := storedCount(t, rg.st.DB(), key); got != limit {
		t.Errorf("got stored count %d, want %d", got, limit)
	}
}

func TestExactOverHTTP(t *testing.T) {
	const limit, clients = 100, 300
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, limit, time.Minute, rigOptions{})
			h := &counted{}
			srv := httptest.NewServer(w.wrap(rg.lim, h))
			t.Cleanup(srv.Close)

			got := getAtOnce(t, srv.Client(), srv.URL, clients)
			if got[http.StatusOK] != limit || got[http.StatusTooManyRequests] != clients-limit || len(got) != 2 {
				t.Errorf("got statuses %v, want %d × 200 and %d × 429", got, limit, clients-limit)
			}
			if n := h.runs.Load(); n != limit {
				t.Errorf("got handler run %d times, want %d", n, limit)
			}
			key := rg.lim.CounterKey(request("127.0.0.1:1"))
			if n, _, _ := storedCount(t, rg.st.DB(), key); n != limit {
				t.Errorf("got stored count %d, want %d", n, limit)
			}
		})
	}
}

func TestElapsedWindowResetsOnAccess(t *testing.T) {
	const window = time.Minute
	rg := newRig(t, 2, window, rigOptions{})
	key := rg.lim.CounterKey(request("192.0.2.1:1"))
	for i, want := range []bool{true, true, false} {
		if v := rg.allowKey(t, key); v.Allowed != want {
			t.Fatalf("request %d: got allowed %v, want %v", i+1, v.Allowed, want)
		}
	}

	rg.clock.Advance(window)
	v := rg.allowKey(t, key)
	if !v.Allowed || v.Remaining != 1 {
		t.Errorf("after the window: got %+v, want allowed with 1 remaining", v)
	}
	count, start, ok := storedCount(t, rg.st.DB(), key)
	if !ok || count != 1 || !start.Equal(t0.Add(window)) {
		t.Errorf("got row (count %d, window_start %v, found %v), want count 1 from %v", count, start, ok, t0.Add(window))
	}
}

func TestWallClockJumpGrantsNothing(t *testing.T) {
	const window = time.Minute
	tests := []struct {
		name string
		jump time.Duration
	}{
		{"set back an hour", -time.Hour},
		{"set forward an hour", time.Hour},
		{"set forward a window", window},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, 2, window, rigOptions{})
			h := rg.lim.Handler(&counted{})
			for range 2 {
				serve(h, request("192.0.2.1:1"))
			}
			rg.clock.Advance(20 * time.Second)
			rg.clock.Jump(tt.jump)

			res, _ := serve(h, request("192.0.2.1:1"))
			if res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("after the jump: got status %d, want 429", res.StatusCode)
			}
			if got := res.Header.Get("Retry-After"); got != "40" {
				t.Errorf("got Retry-After %q, want %q: the window ends 40s from now whatever the wall says", got, "40")
			}
			// The reset a client reads is on its wall clock, which jumped too.
			wantReset := t0.Add(20*time.Second + tt.jump + 40*time.Second).Unix()
			if got := res.Header.Get("X-RateLimit-Reset"); got != strconv.FormatInt(wantReset, 10) {
				t.Errorf("got X-RateLimit-Reset %q, want %d", got, wantReset)
			}

			rg.clock.Advance(40 * time.Second)
			if res, _ := serve(h, request("192.0.2.1:1")); res.StatusCode != http.StatusOK {
				t.Errorf("once the window has elapsed: got status %d, want 200", res.StatusCode)
			}
		})
	}
}

func TestRestartKeepsCounters(t *testing.T) {
	const limit, window = 2, time.Minute
	tests := []struct {
		name      string
		downtime  time.Duration // wall time between the runs
		wallShift time.Duration // the restarted process's wall clock error
		wantLeft  time.Duration // how long the restarted process stays limited
	}{
		{"quick restart", 10 * time.Second, 0, 50 * time.Second},
		{"wall clock an hour earlier", 10 * time.Second, -time.Hour, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := newRig(t, limit, window, rigOptions{})
			key := first.lim.CounterKey(request("192.0.2.1:1"))
			for range limit {
				if v := first.allowKey(t, key); !v.Allowed {
					t.Fatal("got a refusal within the limit")
				}
			}
			first.stop(t)

			clock := porchtest.NewFakeClock(t0.Add(tt.downtime + tt.wallShift))
			second := newRig(t, limit, window, rigOptions{path: first.path, clock: clock})
			if v := second.allowKey(t, key); v.Allowed {
				t.Fatal("after restart: got allowed, want still limited")
			}
			clock.Advance(tt.wantLeft - time.Millisecond)
			if v := second.allowKey(t, key); v.Allowed {
				t.Fatalf("after restart, %v later: got allowed, want still limited", tt.wantLeft-time.Millisecond)
			}
			clock.Advance(time.Millisecond)
			if v := second.allowKey(t, key); !v.Allowed {
				t.Errorf("after restart, %v later: got refused, want the window to have closed", tt.wantLeft)
			}
		})
	}
}

func TestNameScopesCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	clock := porchtest.NewFakeClock(t0)
	a := newRig(t, 1, time.Minute, rigOptions{path: path, clock: clock, rate: rate.Options{Name: "a"}})
	b, err := rate.New(a.pool, a.st, 1, time.Minute, rate.Options{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	r := request("192.0.2.1:1")
	if ka, kb := a.lim.CounterKey(r), b.CounterKey(r); ka == kb {
		t.Fatalf("got the same key %q from limiters a and b, want them apart", ka)
	}
	for _, l := range []*rate.Limiter{a.lim, b} {
		res, _ := serve(l.Handler(&counted{}), request("192.0.2.1:1"))
		if res.StatusCode != http.StatusOK {
			t.Errorf("got status %d, want 200: each limiter counts on its own", res.StatusCode)
		}
	}
	res, _ := serve(b.Handler(&counted{}), request("192.0.2.1:1"))
	if got := res.Header.Get("RateLimit-Policy"); got != `"b";q=1;w=60` {
		t.Errorf("got RateLimit-Policy %q, want %q", got, `"b";q=1;w=60`)
	}
	if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"b";`) {
		t.Errorf("got RateLimit %q, want it to name policy b", got)
	}
}

func TestSaturatedPoolFailsClosed(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{pool: porch.PoolOptions{Size: 1, Mailbox: 1}})
			h := &counted{}
			handler := w.wrap(rg.lim, h)
			release := blockActors(t, rg.pool)

			res, body := serve(handler, request("192.0.2.1:1"))
			wantProblem(t, res, body, http.StatusServiceUnavailable, rate.ProblemUnavailable)
			if n := h.runs.Load(); n != 0 {
				t.Errorf("got handler run %d times, want 0: a saturated limiter must not serve", n)
			}

			release()
			res, _ = serve(handler, request("192.0.2.1:1"))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("after saturation: got status %d, want 200", res.StatusCode)
			}
			// The refused request was not counted.
			if got := res.Header.Get("X-RateLimit-Remaining"); got != "4" {
				t.Errorf("got X-RateLimit-Remaining %q, want %q", got, "4")
			}
			key := rg.lim.CounterKey(request("192.0.2.1:1"))
			if n, _, _ := storedCount(t, rg.st.DB(), key); n != 1 {
				t.Errorf("got stored count %d, want 1", n)
			}
		})
	}
}

func TestFailedWriteFailsClosed(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{})
			if _, err := rg.st.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
				BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
				t.Fatal(err)
			}
			h := &counted{}
			res, body := serve(w.wrap(rg.lim, h), request("192.0.2.1:1"))
			wantProblem(t, res, body, http.StatusServiceUnavailable, rate.ProblemUnavailable)
			if n := h.runs.Load(); n != 0 {
				t.Errorf("got handler run %d times, want 0: an uncounted request must not be served", n)
			}
			if st := rg.st.Stats(); st.Failed == 0 {
				t.Errorf("got Stats() = %+v, want a failed commit", st)
			}
		})
	}
}

// Allow takes a principal and keys it as Options.Key's principals are, so
// its counts are the ones a restart loads back. When Allow stored the
// caller's string as the row's key, 2 were allowed before a restart at a
// limit of 2 and 2 more after it.
func TestAllowPrincipalSurvivesRestart(t *testing.T) {
	const limit = 2
	byHeader := rate.Options{KeyFunc: porch.KeyByHeader("X-User")}
	first := newRig(t, limit, time.Hour, rigOptions{rate: byHeader})
	for i := range limit {
		if v := first.allow(t, "user42"); !v.Allowed {
			t.Fatalf("Allow %d: refused within the limit", i+1)
		}
	}
	first.stop(t)

	second := newRig(t, limit, time.Hour, rigOptions{path: first.path, clock: first.clock, rate: byHeader})
	if v := second.allow(t, "user42"); v.Allowed {
		t.Fatal("Allow after a restart: allowed, want refused at the limit")
	}
	// A request whose Options.Key names the same principal shares the count.
	req := request("192.0.2.1:1")
	req.Header.Set("X-User", "user42")
	if res, _ := serve(second.lim.Handler(&counted{}), req); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a request for principal user42: got status %d, want 429", res.StatusCode)
	}
	if v := second.allow(t, "user43"); !v.Allowed {
		t.Error("another principal: refused, want allowed")
	}
	if _, err := second.lim.Allow(context.Background(), ""); !errors.Is(err, rate.ErrNoPrincipal) {
		t.Errorf("Allow with no principal: got %v, want ErrNoPrincipal", err)
	}
}
