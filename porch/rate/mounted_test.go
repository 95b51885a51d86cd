package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// A limiter mounted twice on one route counts each request once, whichever
// entry points mount it: the README's r.Use(lim.Handler) with
// r.With(porch.Chain(lim, keys)) counted every checkout twice (Remaining
// 79, 77, 75), silently. The mount further out counts and reports; the one
// further in passes the request on. Two different limiters on one route
// both still count.
func TestMountedTwiceCountsOnce(t *testing.T) {
	const (
		policyA   = `"a";q=5;w=60`
		policyB   = `"b";q=100;w=3600`
		policySet = policyA + ", " + policyB
	)
	chain := func(m porch.Middleware, h http.Handler) http.Handler { return porch.Chain(m)(h) }
	tests := []struct {
		name  string
		wrap  func(a, b *rate.Limiter, s *rate.Set, h http.Handler) http.Handler
		bToo  bool   // b counts each request too
		wantA bool   // the headers report a's verdict, else the set's or b's
		want  string // RateLimit-Policy
	}{
		{"Handler+Handler", func(a, _ *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return a.Handler(a.Handler(h))
		}, false, true, policyA},
		{"Handler+Chain", func(a, _ *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return a.Handler(chain(a, h))
		}, false, true, policyA},
		{"Chain+Handler", func(a, _ *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return chain(a, a.Handler(h))
		}, false, true, policyA},
		{"Chain+Chain", func(a, _ *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return chain(a, chain(a, h))
		}, false, true, policyA},
		{"one Chain twice", func(a, _ *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return porch.Chain(a, a)(h)
		}, false, true, policyA},
		// The set reports a, which has the least remaining, and both
		// policies.
		{"Handler+Set", func(a, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return a.Handler(s.Handler(h))
		}, true, true, policySet},
		{"Set+Handler", func(a, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return s.Handler(a.Handler(h))
		}, true, true, policySet},
		{"Set chain+Chain", func(a, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return chain(s, chain(a, h))
		}, true, true, policySet},
		// The chain further in must not write a's headers over the set's.
		{"Set.Handler+Chain", func(a, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return s.Handler(chain(a, h))
		}, true, true, policySet},
		// Under a chain the outer limiter reports last.
		{"Chain of a and the set", func(a, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return porch.Chain(a, s)(h)
		}, true, true, policyA},
		{"Set twice", func(_, _ *rate.Limiter, s *rate.Set, h http.Handler) http.Handler {
			return s.Handler(chain(s, h))
		}, true, true, policySet},
		// Different limiters: both count, as before.
		{"different limiters, Handler", func(a, b *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return a.Handler(b.Handler(h))
		}, true, false, policyB},
		{"different limiters, Chain", func(a, b *rate.Limiter, _ *rate.Set, h http.Handler) http.Handler {
			return porch.Chain(a, b)(h)
		}, true, true, policyA},
	}
	alice := func(*http.Request) (string, error) { return "alice", nil }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Name: "a", KeyFunc: alice}})
			b, err := rate.New(rg.pool, rg.st, 100, time.Hour, rate.Options{Name: "b", KeyFunc: alice})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(context.Background()) })
			h := &counted{}
			handler := tt.wrap(rg.lim, b, rate.All(rg.lim, b), h)
			for i := int64(1); i <= 3; i++ {
				res, body := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != http.StatusOK || h.runs.Load() != i {
					t.Fatalf("request %d: got status %d (%s), handler runs %d", i, res.StatusCode, body, h.runs.Load())
				}
				wantB := int64(100)
				if tt.bToo {
					wantB -= i
				}
				if got := peek(t, rg.lim); got != 5-i {
					t.Errorf("request %d: a has %d left, want %d: counted once per request", i, got, 5-i)
				}
				if got := peek(t, b); got != wantB {
					t.Errorf("request %d: b has %d left, want %d", i, got, wantB)
				}
				want := strconv.FormatInt(wantB, 10)
				if tt.wantA {
					want = strconv.FormatInt(5-i, 10)
				}
				if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != want {
					t.Errorf("request %d: got X-RateLimit-Remaining %q, want [%s]", i, got, want)
				}
				if got := res.Header.Values("RateLimit-Policy"); len(got) != 1 || got[0] != tt.want {
					t.Errorf("request %d: got RateLimit-Policy %q, want [%s]", i, got, tt.want)
				}
			}
		})
	}
}

// peek is l's Remaining for alice.
func peek(t *testing.T, l *rate.Limiter) int64 {
	t.Helper()
	v, err := l.Peek(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	return v.Remaining
}

// A sub-request an application builds on the request's context (a batch
// endpoint replaying its operations through the router) is a request of
// its own, and is counted as one, whatever the mount record of the request
// it came from says: once, ten sub-requests for another principal all
// passed a limit of 3 uncounted.
func TestSubRequestOnTheSameContextIsCounted(t *testing.T) {
	for _, mount := range []struct {
		name string
		wrap func(l *rate.Limiter, h http.Handler) http.Handler
	}{
		{"Handler", func(l *rate.Limiter, h http.Handler) http.Handler { return l.Handler(h) }},
		{"Chain", func(l *rate.Limiter, h http.Handler) http.Handler { return porch.Chain(l)(h) }},
		{"Set", func(l *rate.Limiter, h http.Handler) http.Handler { return rate.All(l).Handler(h) }},
	} {
		t.Run(mount.name, func(t *testing.T) {
			rg := newRig(t, 3, time.Hour, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User")}})
			served := 0
			var router http.Handler
			op := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })
			batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for range 10 {
					sub, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "/op", nil)
					sub.RemoteAddr = r.RemoteAddr
					sub.Header.Set("X-User", "victim")
					router.ServeHTTP(httptest.NewRecorder(), sub)
				}
			})
			router = mount.wrap(rg.lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/batch" {
					batch.ServeHTTP(w, r)
					return
				}
				op.ServeHTTP(w, r)
			}))
			req := request("192.0.2.1:1")
			req.URL.Path = "/batch"
			req.Header.Set("X-User", "attacker")
			router.ServeHTTP(httptest.NewRecorder(), req)
			if served != 3 {
				t.Errorf("sub-requests served: %d of 10, want the victim's limit, 3", served)
			}
		})
	}
}
