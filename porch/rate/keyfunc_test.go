package rate_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// skipHealth exempts /healthz and keys the rest by the X-User header.
func skipHealth(r *http.Request) (string, error) {
	if r.URL.Path == "/healthz" {
		return "", porch.ErrSkip
	}
	return r.Header.Get("X-User"), nil
}

func TestKeyFuncSkip(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{KeyFunc: skipHealth}})
			h := &counted{}
			handler := w.wrap(rg.lim, h)
			for i := range 3 {
				r := request("192.0.2.1:1")
				r.URL.Path = "/healthz"
				res, _ := serve(handler, r)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("health check %d: got status %d, want 200", i+1, res.StatusCode)
				}
				if got := res.Header.Get("RateLimit"); got != "" {
					t.Errorf("health check %d: got RateLimit %q, want none on an exempt request", i+1, got)
				}
			}
			// The exempt requests were not counted: the client's one
			// request is still there.
			if res, _ := serve(handler, request("192.0.2.1:1")); res.StatusCode != http.StatusOK {
				t.Fatalf("first counted request: got status %d, want 200", res.StatusCode)
			}
			if res, _ := serve(handler, request("192.0.2.1:1")); res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("second counted request: got status %d, want 429", res.StatusCode)
			}
			if n := h.runs.Load(); n != 4 {
				t.Errorf("got handler run %d times, want 4", n)
			}
		})
	}
}

func TestKeyFuncErrorFailsClosed(t *testing.T) {
	down := errors.New("session store down")
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			keyFunc := func(*http.Request) (string, error) { return "", down }
			rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: keyFunc}})
			h := &counted{}
			res, body := serve(w.wrap(rg.lim, h), request("192.0.2.1:1"))
			wantPlainProblem(t, res, body, http.StatusInternalServerError, rate.ProblemKeyFailed)
			if n := h.runs.Load(); n != 0 {
				t.Errorf("got handler run %d times, want 0: an uncounted request must not be served", n)
			}
		})
	}
}

// A request with no client address (RemoteAddr empty, as on a
// sub-request a batch endpoint builds with http.NewRequestWithContext and
// forgets to give its caller's) is not keyed by address: every such
// request, every caller's, would share the one counter of "" (a caller
// could exhaust it for all the others). It fails closed, as a failing
// KeyFunc does, whether the limiter keys by address itself, falls back to
// it, or is given porch.KeyByIP, alone or joined.
func TestNoClientAddressFailsClosed(t *testing.T) {
	keyFuncs := []struct {
		name    string
		keyFunc porch.KeyFunc
	}{
		{"default", nil},
		{"KeyByHeader, absent", porch.KeyByHeader("X-User")},
		{"KeyByIP", porch.KeyByIP},
		{"KeyByClientIP", porch.KeyByClientIP},
		{"JoinKeys(KeyByHeader, KeyByIP)", porch.JoinKeys(porch.KeyByHeader("X-User"), porch.KeyByIP)},
	}
	for _, kf := range keyFuncs {
		for _, w := range wirings {
			t.Run(kf.name+"/"+w.name, func(t *testing.T) {
				rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: kf.keyFunc}})
				h := &counted{}
				handler := w.wrap(rg.lim, h)
				req, _ := http.NewRequest(http.MethodGet, "/orders/1", nil)
				res, body := serve(handler, req)
				wantPlainProblem(t, res, body, http.StatusInternalServerError, rate.ProblemKeyFailed)
				if n := h.runs.Load(); n != 0 {
					t.Errorf("got handler run %d times, want 0: an uncounted request must not be served", n)
				}
				req.RemoteAddr = "192.0.2.1:1"
				if res, body := serve(handler, req); res.StatusCode != http.StatusOK {
					t.Errorf("with a RemoteAddr: got status %d (%s), want 200", res.StatusCode, body)
				}
			})
		}
	}
}

// wantPlainProblem checks that res is a problem+json answer of status and
// type without Retry-After: retrying does not help.
func wantPlainProblem(t *testing.T, res *http.Response, body []byte, status int, typ string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("got status %d, want %d (body %s)", res.StatusCode, status, body)
	}
	var p porch.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode problem %q: %v", body, err)
	}
	if p.Type != typ || p.Status != status {
		t.Errorf("got problem type %q status %d, want %q %d", p.Type, p.Status, typ, status)
	}
	if got := res.Header.Get("Retry-After"); got != "" {
		t.Errorf("got Retry-After %q, want none", got)
	}
}

func TestKeys(t *testing.T) {
	rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{
		KeyFunc: porch.JoinKeys(porch.KeyByHeader("X-User"), porch.KeyByRoute),
	}})
	var keys []string
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, rg.lim.CounterKey(r))
	})
	r := chi.NewRouter()
	r.With(func(http.Handler) http.Handler { return record }).Get("/orders/{id}", nil)
	r.With(func(http.Handler) http.Handler { return record }).Get("/cart", nil)
	req := func(path, user, addr string) *http.Request {
		q := request(addr)
		q.URL.Path = path
		if user != "" {
			q.Header.Set("X-User", user)
		}
		return q
	}
	tests := []struct {
		name     string
		a, b     *http.Request
		wantSame bool
	}{
		{"one user, two paths of one route", req("/orders/1", "alice", "192.0.2.1:1"), req("/orders/2", "alice", "198.51.100.1:1"), true},
		{"one user, two routes", req("/orders/1", "alice", "192.0.2.1:1"), req("/cart", "alice", "192.0.2.1:1"), false},
		{"two users, one route", req("/orders/1", "alice", "192.0.2.1:1"), req("/orders/1", "bob", "192.0.2.1:1"), false},
		{"no user falls back to the address", req("/orders/1", "", "192.0.2.1:1"), req("/cart", "", "192.0.2.1:2"), true},
		{"no user, two addresses", req("/orders/1", "", "192.0.2.1:1"), req("/orders/1", "", "198.51.100.1:1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys = nil
			serve(r, tt.a)
			serve(r, tt.b)
			if len(keys) != 2 {
				t.Fatalf("got %d keys, want 2", len(keys))
			}
			if (keys[0] == keys[1]) != tt.wantSame {
				t.Errorf("got keys %q and %q, want same = %v", keys[0], keys[1], tt.wantSame)
			}
		})
	}
}

// Parts are length-prefixed: ("a:b", "c") and ("a", "b:c") are two keys.
func TestKeysDoNotCollide(t *testing.T) {
	k := porch.JoinKeys(porch.KeyByHeader("X-A"), porch.KeyByHeader("X-B"))
	key := func(a, b string) string {
		r := request("192.0.2.1:1")
		r.Header.Set("X-A", a)
		r.Header.Set("X-B", b)
		s, err := k(r)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, p := range [][2][2]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"1:a", "b"}, {"1", "a:b"}},
		{{"a2:bc", "d"}, {"a", "bc2:d"}},
	} {
		if x, y := key(p[0][0], p[0][1]), key(p[1][0], p[1][1]); x == y {
			t.Errorf("parts %q and %q: got one key %q", p[0], p[1], x)
		}
	}
}

// chi knows the route pattern only after routing: a limiter keyed by route
// on the top router's Use must say so, not key on the raw path (a fresh
// counter per path).
func TestKeyByRouteBeforeRouting(t *testing.T) {
	rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByRoute}})
	r := chi.NewRouter()
	r.Use(rg.lim.Handler)
	h := &counted{}
	r.Get("/orders/{id}", h.ServeHTTP)
	q := request("192.0.2.1:1")
	q.URL.Path = "/orders/1"
	res, body := serve(r, q)
	wantPlainProblem(t, res, body, http.StatusInternalServerError, rate.ProblemKeyFailed)
	if _, err := porch.KeyByRoute(q); !errors.Is(err, porch.ErrNoRoute) {
		t.Errorf("KeyByRoute without chi: got %v, want ErrNoRoute", err)
	}
}
