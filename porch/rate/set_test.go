package rate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// policy is one limiter of a set under test.
type policy struct {
	name   string
	limit  int
	window time.Duration
	opt    rate.Options // Name is set from name
}

// newSet builds the limiters of ps on one rig's pool and SQLite store, and
// their set.
func newSet(t *testing.T, ps ...policy) (*rig, []*rate.Limiter, *rate.Set) {
	t.Helper()
	first := ps[0]
	first.opt.Name = first.name
	rg := newRig(t, first.limit, first.window, rigOptions{rate: first.opt})
	lims := []*rate.Limiter{rg.lim}
	for _, p := range ps[1:] {
		p.opt.Name = p.name
		l, err := rate.New(rg.pool, rg.st, p.limit, p.window, p.opt)
		if err != nil {
			t.Fatalf("new limiter %q: %v", p.name, err)
		}
		lims = append(lims, l)
	}
	return rg, lims, rate.All(lims...)
}

// setWiring puts a set in front of a handler one of the two supported ways.
type setWiring struct {
	name string
	wrap func(s *rate.Set, h http.Handler) http.Handler
}

var setWirings = []setWiring{
	{"porch.Chain", func(s *rate.Set, h http.Handler) http.Handler { return porch.Chain(s)(h) }},
	{"Set.Handler", func(s *rate.Set, h http.Handler) http.Handler { return s.Handler(h) }},
}

// rateHeaders are the fields a set must keep coherent.
var rateHeaders = []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy", "X-RateLimit-Dry-Run"}

// wantHeaders checks every rate header of res against want ("" for absent).
func wantHeaders(t *testing.T, label string, res *http.Response, want map[string]string) {
	t.Helper()
	for _, k := range rateHeaders {
		if got := res.Header.Get(k); got != want[k] {
			t.Errorf("%s: got %s %q, want %q", label, k, got, want[k])
		}
	}
}

// burstHourly is the route: a burst limit per minute and an hourly
// one, with the limits given.
func burstHourly(burst, hourly int) []policy {
	return []policy{{name: "burst", limit: burst, window: time.Minute}, {name: "hourly", limit: hourly, window: time.Hour}}
}

func policyHeader(burst, hourly int) string {
	return `"burst";q=` + strconv.Itoa(burst) + `;w=60, "hourly";q=` + strconv.Itoa(hourly) + `;w=3600`
}

// Whichever policy refuses, Retry-After and every X-RateLimit-* and
// RateLimit field of the 429 come from it, and RateLimit-Policy lists both.
// Before the set, the 429's Retry-After came from one policy and
// X-RateLimit-Remaining from the other.
func TestSetRefusalIsTheRefusersAnswer(t *testing.T) {
	tests := []struct {
		name          string
		burst, hourly int
		want          map[string]string // the third request's headers, 10s in
	}{
		{"burst refuses", 2, 10, map[string]string{
			"Retry-After": "50", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": unix(t0.Add(time.Minute)), "RateLimit": `"burst";r=0;t=50`,
		}},
		{"hourly refuses", 10, 2, map[string]string{
			"Retry-After": "3590", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": unix(t0.Add(time.Hour)), "RateLimit": `"hourly";r=0;t=3590`,
		}},
		// Both refuse: the client must wait for the hourly window.
		{"both refuse", 2, 2, map[string]string{
			"Retry-After": "3590", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": unix(t0.Add(time.Hour)), "RateLimit": `"hourly";r=0;t=3590`,
		}},
	}
	for _, w := range setWirings {
		for _, tt := range tests {
			t.Run(w.name+"/"+tt.name, func(t *testing.T) {
				rg, _, set := newSet(t, burstHourly(tt.burst, tt.hourly)...)
				h := &counted{}
				handler := w.wrap(set, h)
				serve(handler, request("192.0.2.1:1"))
				serve(handler, request("192.0.2.1:1"))
				rg.clock.Advance(10 * time.Second)
				res, body := serve(handler, request("192.0.2.1:1"))
				wantProblem(t, res, body, http.StatusTooManyRequests, rate.ProblemLimited)
				tt.want["RateLimit-Policy"] = policyHeader(tt.burst, tt.hourly)
				wantHeaders(t, "the refusal", res, tt.want)
				if n := h.runs.Load(); n != 2 {
					t.Errorf("got handler run %d times, want 2", n)
				}
			})
		}
	}
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// An allowed request reports the policy with the least remaining, the one
// closing last on a tie, and announces both.
func TestSetAllowedReportsLeastRemaining(t *testing.T) {
	tests := []struct {
		name          string
		burst, hourly int
		want          map[string]string // the first request's headers
	}{
		{"burst has less", 3, 10, map[string]string{
			"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2",
			"X-RateLimit-Reset": unix(t0.Add(time.Minute)), "RateLimit": `"burst";r=2;t=60`,
		}},
		{"hourly has less", 10, 3, map[string]string{
			"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2",
			"X-RateLimit-Reset": unix(t0.Add(time.Hour)), "RateLimit": `"hourly";r=2;t=3600`,
		}},
		{"a tie reports the one closing last", 5, 5, map[string]string{
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4",
			"X-RateLimit-Reset": unix(t0.Add(time.Hour)), "RateLimit": `"hourly";r=4;t=3600`,
		}},
	}
	for _, w := range setWirings {
		for _, tt := range tests {
			t.Run(w.name+"/"+tt.name, func(t *testing.T) {
				_, _, set := newSet(t, burstHourly(tt.burst, tt.hourly)...)
				res, body := serve(w.wrap(set, &counted{}), request("192.0.2.1:1"))
				if res.StatusCode != http.StatusOK || string(body) != "ok" {
					t.Fatalf("got %d %q, want 200 ok", res.StatusCode, body)
				}
				tt.want["RateLimit-Policy"] = policyHeader(tt.burst, tt.hourly)
				wantHeaders(t, "allowed", res, tt.want)
			})
		}
	}
}

// A request one limiter refuses changes nothing in the others: their hits
// are given back, whichever of them counted first.
func TestSetRefusedRequestCountsNothing(t *testing.T) {
	tests := []struct {
		name     string
		ps       []policy
		refusing int // index of the limiter that refuses after one request
	}{
		{"refused by the second", []policy{{name: "a", limit: 5, window: time.Minute}, {name: "b", limit: 1, window: time.Hour}}, 1},
		{"refused by the first", []policy{{name: "a", limit: 1, window: time.Minute}, {name: "b", limit: 5, window: time.Hour}}, 0},
	}
	for _, w := range setWirings {
		for _, tt := range tests {
			t.Run(w.name+"/"+tt.name, func(t *testing.T) {
				_, lims, set := newSet(t, tt.ps...)
				handler := w.wrap(set, &counted{})
				for i, want := range []int{200, 429, 429, 429, 429, 429} {
					if res, _ := serve(handler, request("192.0.2.1:1")); res.StatusCode != want {
						t.Fatalf("request %d: got status %d, want %d", i+1, res.StatusCode, want)
					}
				}
				other := lims[1-tt.refusing]
				// One request was served: the other limiter has 5-1 left,
				// and this hit takes one more.
				v, err := other.AllowKey(context.Background(), other.CounterKey(request("192.0.2.1:1")))
				if err != nil {
					t.Fatal(err)
				}
				if !v.Allowed || v.Remaining != 3 {
					t.Errorf("limiter %s after 5 refusals: got allowed %v remaining %d, want allowed with 3 left", tt.ps[1-tt.refusing].name, v.Allowed, v.Remaining)
				}
			})
		}
	}
}

// A limiter that cannot key or weigh a request fails it as it would alone,
// before the others count it; a limiter that skips it is left out.
func TestSetFailuresCountNothing(t *testing.T) {
	errLookup := errors.New("lookup failed")
	tests := []struct {
		name       string
		b          rate.Options
		wantStatus int
		wantLimit  string // X-RateLimit-Limit, "" for none
	}{
		{"key fails", rate.Options{KeyFunc: func(*http.Request) (string, error) { return "", errLookup }}, http.StatusInternalServerError, ""},
		{"weight over the limit", rate.Options{Weight: func(*http.Request) int { return 3 }}, http.StatusRequestEntityTooLarge, ""},
		{"skipped", rate.Options{KeyFunc: func(*http.Request) (string, error) { return "", porch.ErrSkip }}, http.StatusOK, "5"},
	}
	for _, w := range setWirings {
		for _, tt := range tests {
			t.Run(w.name+"/"+tt.name, func(t *testing.T) {
				_, lims, set := newSet(t, policy{name: "a", limit: 5, window: time.Minute}, policy{name: "b", limit: 2, window: time.Hour, opt: tt.b})
				res, _ := serve(w.wrap(set, &counted{}), request("192.0.2.1:1"))
				if res.StatusCode != tt.wantStatus {
					t.Fatalf("got status %d, want %d", res.StatusCode, tt.wantStatus)
				}
				if got := res.Header.Get("X-RateLimit-Limit"); got != tt.wantLimit {
					t.Errorf("got X-RateLimit-Limit %q, want %q", got, tt.wantLimit)
				}
				wantLeft := int64(4) // nothing counted before this hit
				if tt.wantStatus == http.StatusOK {
					wantLeft = 3
				}
				v, err := lims[0].AllowKey(context.Background(), lims[0].CounterKey(request("192.0.2.1:1")))
				if err != nil || v.Remaining != wantLeft {
					t.Errorf("limiter a afterwards: got %+v, %v; want %d left", v, err, wantLeft)
				}
			})
		}
	}
}

// A saturated pool fails the request closed, and the limiter that did
// count it gives its hit back.
func TestSetSaturatedPoolGivesBack(t *testing.T) {
	a := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Name: "a"}})
	// b counts on a pool of its own, which is blocked.
	b := newRig(t, 5, time.Hour, rigOptions{pool: porch.PoolOptions{Size: 1, Mailbox: 1}, rate: rate.Options{Name: "b"}})
	set := rate.All(a.lim, b.lim)
	release := blockActors(t, b.pool)
	res, body := serve(set.Handler(&counted{}), request("192.0.2.1:1"))
	release()
	wantProblem(t, res, body, http.StatusServiceUnavailable, rate.ProblemUnavailable)
	v, err := a.lim.AllowKey(context.Background(), a.lim.CounterKey(request("192.0.2.1:1")))
	if err != nil || v.Remaining != 4 {
		t.Errorf("limiter a after the 503: got %+v, %v; want 4 left (the failed request given back)", v, err)
	}
}

// A set of dry-run limiters that cannot count serves the request
// uncounted and without headers, as one dry-run limiter does.
func TestSetDryRunServesWhatItCannotCount(t *testing.T) {
	rg := newRig(t, 5, time.Minute, rigOptions{pool: porch.PoolOptions{Size: 1, Mailbox: 1}, rate: rate.Options{DryRun: true}})
	blockActors(t, rg.pool)
	for _, w := range setWirings {
		t.Run(w.name, func(t *testing.T) {
			h := &counted{}
			res, _ := serve(w.wrap(rate.All(rg.lim), h), request("192.0.2.1:1"))
			if res.StatusCode != http.StatusOK || h.runs.Load() != 1 {
				t.Fatalf("got status %d, handler run %d times; want 200, once", res.StatusCode, h.runs.Load())
			}
			wantHeaders(t, "uncounted", res, nil)
		})
	}
}

// A dry-run limiter in a set never refuses: X-RateLimit-Dry-Run says what
// it would have done, the other headers come from the enforcing limiter,
// and RateLimit-Policy lists both. A request the enforcing limiter refuses
// is given back to the dry-run one too.
func TestSetDryRun(t *testing.T) {
	type step struct {
		wantStatus int
		wantDryRun string
		wantLeft   string // X-RateLimit-Remaining, the enforcing limiter's
	}
	for _, w := range setWirings {
		t.Run(w.name, func(t *testing.T) {
			rg, lims, set := newSet(t, policy{name: "new", limit: 4, window: time.Hour, opt: rate.Options{DryRun: true}}, policy{name: "enforced", limit: 3, window: time.Minute})
			handler := w.wrap(set, &counted{})
			send := func(i int, s step) {
				t.Helper()
				res, _ := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != s.wantStatus {
					t.Fatalf("request %d: got status %d, want %d", i, res.StatusCode, s.wantStatus)
				}
				if got := res.Header.Get("X-RateLimit-Dry-Run"); got != s.wantDryRun {
					t.Errorf("request %d: got X-RateLimit-Dry-Run %q, want %q", i, got, s.wantDryRun)
				}
				if got := res.Header.Get("X-RateLimit-Remaining"); got != s.wantLeft {
					t.Errorf("request %d: got X-RateLimit-Remaining %q, want %q", i, got, s.wantLeft)
				}
				if got, want := res.Header.Get("RateLimit-Policy"), `"new";q=4;w=3600, "enforced";q=3;w=60`; got != want {
					t.Errorf("request %d: got RateLimit-Policy %q, want %q", i, got, want)
				}
			}
			for i, s := range []step{{200, "allowed", "2"}, {200, "allowed", "1"}, {200, "allowed", "0"}, {429, "allowed", "0"}} {
				send(i+1, s)
			}
			// The refused fourth request was given back: the dry-run
			// limiter has counted 3 of 4, and this hit is its fourth.
			if v, _ := lims[0].AllowKey(context.Background(), lims[0].CounterKey(request("192.0.2.1:1"))); !v.Allowed {
				t.Fatalf("dry-run limiter after the refusal: got refused, want the refused request given back")
			}
			rg.clock.Advance(time.Minute)
			send(5, step{200, "limited", "2"})
		})
	}
}

// Two limiters chained without a set do not contradict each other: a 429
// is wholly the refusing limiter's. The outer limiter's After once wrote
// its own X-RateLimit-* over the inner one's refusal.
func TestChainedLimitersReportTheRefuser(t *testing.T) {
	chains := []struct {
		name  string
		chain func(a, b *rate.Limiter) http.Handler
	}{
		{"porch.Chain", func(a, b *rate.Limiter) http.Handler { return porch.Chain(a, b)(&counted{}) }},
		{"Limiter.Handler", func(a, b *rate.Limiter) http.Handler { return a.Handler(b.Handler(&counted{})) }},
	}
	for _, c := range chains {
		t.Run(c.name, func(t *testing.T) {
			_, lims, _ := newSet(t, burstHourly(10, 1)...)
			h := c.chain(lims[0], lims[1])
			serve(h, request("192.0.2.1:1"))
			res, _ := serve(h, request("192.0.2.1:1"))
			if res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("got status %d, want 429", res.StatusCode)
			}
			wantHeaders(t, "the refusal", res, map[string]string{
				"Retry-After": "3600", "X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset": unix(t0.Add(time.Hour)), "RateLimit": `"hourly";r=0;t=3600`,
				"RateLimit-Policy": `"hourly";q=1;w=3600`,
			})
		})
	}
}

// Under parallel requests a set serves no more than its tightest limit,
// and once they are done every limiter's count is exactly the requests
// served: every hit of a refused request was given back, in memory and, at
// Close, in the store.
func TestSetExactUnderParallelism(t *testing.T) {
	const burst, hourly, clients = 40, 60, 300
	for _, w := range setWirings {
		t.Run(w.name, func(t *testing.T) {
			_, lims, set := newSet(t, burstHourly(burst, hourly)...)
			h := &counted{}
			srv := httptest.NewServer(w.wrap(set, h))
			t.Cleanup(srv.Close)
			got := getAtOnce(t, srv.Client(), srv.URL, clients)
			for status, count := range got {
				if status != http.StatusOK && status != http.StatusTooManyRequests {
					t.Errorf("got status %d (%d times), want 200 or 429", status, count)
				}
			}
			n := got[http.StatusOK]
			if n < 1 || n > burst || n != h.runs.Load() {
				t.Fatalf("served %d (handler ran %d), want 1..%d", n, h.runs.Load(), burst)
			}
			for i, l := range lims {
				key := l.CounterKey(request("127.0.0.1:1"))
				limit := []int64{burst, hourly}[i]
				v, err := l.AllowKey(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if want := max(limit-n-1, 0); v.Remaining != want {
					t.Errorf("limiter %d: got %d remaining after %d served and one more hit, want %d", i, v.Remaining, n, want)
				}
			}
		})
	}
}

// All panics on a programming error, with a "rate: " message.
func TestAllPanicsOnBadConfig(t *testing.T) {
	_, lims, _ := newSet(t, burstHourly(1, 1)...)
	tests := []struct {
		name      string
		lims      []*rate.Limiter
		wantPanic string
	}{
		{"none", nil, "at least one"},
		{"nil", []*rate.Limiter{lims[0], nil}, "non-nil"},
		{"one Name twice", []*rate.Limiter{lims[0], lims[1], lims[0]}, "distinct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "rate: ") || !strings.Contains(msg, tt.wantPanic) {
					t.Errorf("got panic %q, want one prefixed %q that says %q", msg, "rate: ", tt.wantPanic)
				}
			}()
			rate.All(tt.lims...)
		})
	}
}
