package rate_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// byPlan picks a request's tier from X-Plan (in an application, from the
// principal its authentication resolved): "broken" fails, "internal" is
// exempt.
func byPlan(r *http.Request) (string, error) {
	switch plan := r.Header.Get("X-Plan"); plan {
	case "broken":
		return "", errors.New("plan lookup failed")
	case "internal":
		return "", porch.ErrSkip
	default:
		return plan, nil
	}
}

// planRequest is a request by user on plan.
func planRequest(user, plan string) *http.Request {
	r := request("192.0.2.1:1")
	r.Header.Set("X-User", user)
	r.Header.Set("X-Plan", plan)
	return r
}

// newTiers builds a free tier of 2 and a paid tier of 5 a minute on one
// store, keyed by user.
func newTiers(t *testing.T) (free, paid *rate.Limiter, tiered *rate.Tiered) {
	t.Helper()
	rg := newRig(t, 2, time.Minute, rigOptions{rate: rate.Options{Name: "free", KeyFunc: byUser}})
	paid, err := rate.New(rg.pool, rg.st, 5, time.Minute, rate.Options{Name: "paid", KeyFunc: byUser})
	if err != nil {
		t.Fatal(err)
	}
	return rg.lim, paid, rate.Tiers(byPlan, map[string]rate.Tier{"free": rg.lim, "paid": paid})
}

// Each request is counted by its tier's limiter, under its policy and with
// its headers; a request whose tier cannot be told is a 500 and is neither
// counted nor served; ErrSkip exempts.
func TestTiers(t *testing.T) {
	wraps := map[string]func(*rate.Tiered, http.Handler) http.Handler{
		"porch.Chain":    func(tr *rate.Tiered, h http.Handler) http.Handler { return porch.Chain(tr)(h) },
		"Tiered.Handler": func(tr *rate.Tiered, h http.Handler) http.Handler { return tr.Handler(h) },
	}
	for name, wrap := range wraps {
		t.Run(name, func(t *testing.T) {
			free, paid, tiered := newTiers(t)
			h := &counted{}
			handler := wrap(tiered, h)
			for plan, limit := range map[string]int{"free": 2, "paid": 5} {
				for i := range limit + 1 {
					res, _ := serve(handler, planRequest("u-"+plan, plan))
					want := http.StatusOK
					if i == limit {
						want = http.StatusTooManyRequests
					}
					if res.StatusCode != want {
						t.Fatalf("%s request %d: got %d, want %d", plan, i+1, res.StatusCode, want)
					}
					if got, want := res.Header.Get("RateLimit-Policy"), `"`+plan+`";q=`; len(got) < len(want) || got[:len(want)] != want {
						t.Fatalf("%s request %d: got RateLimit-Policy %q, want the %s policy", plan, i+1, got, plan)
					}
				}
			}
			runs := h.runs.Load()
			for _, plan := range []string{"gold", "broken"} {
				res, body := serve(handler, planRequest("u-"+plan, plan))
				wantPlainProblem(t, res, body, http.StatusInternalServerError, rate.ProblemKeyFailed)
			}
			if got := h.runs.Load(); got != runs {
				t.Fatalf("an unknown or failing tier ran the handler %d times, want 0", got-runs)
			}
			for _, l := range []*rate.Limiter{free, paid} {
				for _, user := range []string{"u-gold", "u-broken"} {
					if v, err := l.Peek(context.Background(), user); err != nil || v.Remaining != v.Limit {
						t.Fatalf("a request of unknown tier was counted: %+v, %v", v, err)
					}
				}
			}
			res, _ := serve(handler, planRequest("u-internal", "internal"))
			if res.StatusCode != http.StatusOK || res.Header.Get("RateLimit-Policy") != "" {
				t.Fatalf("exempt request: got %d with RateLimit-Policy %q, want 200 without headers", res.StatusCode, res.Header.Get("RateLimit-Policy"))
			}
		})
	}
}

func TestTiersPanics(t *testing.T) {
	_, paid, _ := newTiers(t)
	for name, f := range map[string]func(){
		"nil pick":  func() { rate.Tiers(nil, map[string]rate.Tier{"paid": paid}) },
		"no tier":   func() { rate.Tiers(byPlan, nil) },
		"nil tier":  func() { rate.Tiers(byPlan, map[string]rate.Tier{"paid": (*rate.Limiter)(nil)}) },
		"nil iface": func() { rate.Tiers(byPlan, map[string]rate.Tier{"paid": nil}) },
	} {
		func() {
			defer func() {
				if v, ok := recover().(string); !ok || len(v) < 6 || v[:6] != "rate: " {
					t.Errorf("%s: got panic %v, want a \"rate: \" message", name, v)
				}
			}()
			f()
		}()
	}
}
