package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// A batch endpoint that replays operations through its router counts them
// only if it asks, with rate.CountAgain: a sub-request is otherwise part of
// the request it came from, which the limiter counted once, however the
// operation was built (a new request on r.Context(), r.WithContext, a
// Clone). Asked, each operation is counted as a request of its own, against
// its own key (the victim's, where the batch names one), once however often
// the route mounts the limiter; and the batch itself keeps its own count
// and headers.
func TestSubRequests(t *testing.T) {
	builds := []struct {
		name   string
		victim bool // the operations are another principal's
		op     func(ctx context.Context, r *http.Request) *http.Request
	}{
		{"NewRequestWithContext, another principal", true, func(ctx context.Context, r *http.Request) *http.Request {
			op, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/op", nil)
			op.RemoteAddr = r.RemoteAddr
			op.Header.Set("X-User", "victim")
			return op
		}},
		{"Clone, another principal", true, func(ctx context.Context, r *http.Request) *http.Request {
			op := r.Clone(ctx)
			op.URL.Path = "/op"
			op.Header.Set("X-User", "victim")
			return op
		}},
		{"WithContext, the same principal", false, func(ctx context.Context, r *http.Request) *http.Request {
			op := r.WithContext(ctx) // shares r's header map
			u := *r.URL
			u.Path = "/op"
			op.URL = &u
			return op
		}},
	}
	mountings := []struct {
		name string
		wrap func(l *rate.Limiter, h http.Handler) http.Handler
	}{
		{"Handler", func(l *rate.Limiter, h http.Handler) http.Handler { return l.Handler(h) }},
		{"Chain", func(l *rate.Limiter, h http.Handler) http.Handler { return porch.Chain(l)(h) }},
		{"Set", func(l *rate.Limiter, h http.Handler) http.Handler { return rate.All(l).Handler(h) }},
		{"Set chain", func(l *rate.Limiter, h http.Handler) http.Handler { return porch.Chain(rate.All(l))(h) }},
		{"Tiers", func(l *rate.Limiter, h http.Handler) http.Handler {
			one := func(*http.Request) (string, error) { return "one", nil }
			return rate.Tiers(one, map[string]rate.Tier{"one": l}).Handler(h)
		}},
	}
	for _, b := range builds {
		for _, mount := range mountings {
			for _, again := range []bool{false, true} {
				name := b.name + "/" + mount.name + "/uncounted"
				if again {
					name = b.name + "/" + mount.name + "/CountAgain"
				}
				t.Run(name, func(t *testing.T) {
					rg := newRig(t, 3, time.Hour, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User")}})
					served := 0
					var router http.Handler
					batch := func(w http.ResponseWriter, r *http.Request) {
						ctx := r.Context()
						if again {
							ctx = rate.CountAgain(ctx)
						}
						for range 10 {
							router.ServeHTTP(httptest.NewRecorder(), b.op(ctx, r))
						}
					}
					routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/batch" {
							batch(w, r)
							return
						}
						served++
					})
					// Mounted twice, with a Clone between: each operation
					// is still counted once.
					router = mount.wrap(rg.lim, copies[2].cp.Handler(mount.wrap(rg.lim, routes)))
					req := request("192.0.2.1:1")
					req.URL.Path = "/batch"
					req.Header.Set("X-User", "attacker")
					res, body := serve(router, req)

					want := 10
					switch {
					case again && b.victim:
						want = 3 // the victim's limit
					case again:
						want = 2 // what the batch left of the attacker's
					}
					if served != want {
						t.Errorf("operations served: %d of 10, want %d", served, want)
					}
					if res.StatusCode != http.StatusOK {
						t.Fatalf("batch: got status %d (%s), want 200", res.StatusCode, body)
					}
					if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "2" {
						t.Errorf("batch: got X-RateLimit-Remaining %q, want [2]: its own count", got)
					}
				})
			}
		}
	}
}
