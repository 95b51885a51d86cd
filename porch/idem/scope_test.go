package idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
)

// Without a principal, keys are scoped by the client's address, never
// global: with one global key space a 401 answered to one client was
// replayed to another that sent the same key. Here the handler's first call
// answers 401; the second request replays it only when it comes from the
// same scope, and otherwise runs the handler (201).
func TestScopeWithoutPrincipal(t *testing.T) {
	byHeader := porch.KeyByHeader("X-Account")
	type from struct{ addr, account, xff string }
	tests := []struct {
		name        string
		opt         idem.Options
		behindProxy bool // chi's ClientIPFromXFFTrustedProxies(1) runs first
		first       from
		second      from
		wantReplay  bool
	}{
		{"no principal, two clients", idem.Options{}, false,
			from{addr: "192.0.2.1:1000"}, from{addr: "192.0.2.2:1000"}, false},
		{"no principal, one client on two connections", idem.Options{}, false,
			from{addr: "192.0.2.1:1000"}, from{addr: "192.0.2.1:2000"}, true},
		{"no principal, one IPv6 /64", idem.Options{}, false,
			from{addr: "[2001:db8::1]:1"}, from{addr: "[2001:db8::2]:1"}, true},
		{"no principal, two IPv6 /64s", idem.Options{}, false,
			from{addr: "[2001:db8::1]:1"}, from{addr: "[2001:db8:0:1::1]:1"}, false},
		{"empty principal, two clients", idem.Options{Principal: byHeader}, false,
			from{addr: "192.0.2.1:1"}, from{addr: "192.0.2.2:1"}, false},
		{"one principal, two addresses", idem.Options{Principal: byHeader}, false,
			from{addr: "192.0.2.1:1", account: "alice"}, from{addr: "192.0.2.2:1", account: "alice"}, true},
		{"a principal is not an address", idem.Options{Principal: byHeader}, false,
			from{addr: "192.0.2.1:1", account: "192.0.2.1"}, from{addr: "192.0.2.1:1"}, false},
		{"trusted proxy, two clients", idem.Options{TrustProxy: true}, true,
			from{addr: "10.0.0.1:1", xff: "203.0.113.1"}, from{addr: "10.0.0.1:1", xff: "203.0.113.2"}, false},
		{"proxy not trusted: a forged header changes nothing", idem.Options{}, true,
			from{addr: "192.0.2.1:1", xff: "203.0.113.1"}, from{addr: "192.0.2.1:1", xff: "203.0.113.2"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					http.Error(w, "who are you?", http.StatusUnauthorized)
					return
				}
				created(n, w, r)
			}}
			m := idem.New(newPool(t, porchOptions()), openStore(t, envConfig{}.store), tc.opt)
			h := m.Handler(o)
			if tc.behindProxy {
				h = middleware.ClientIPFromXFFTrustedProxies(1)(h)
			}
			send := func(f from) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("one"))
				r.RemoteAddr = f.addr
				r.Header.Set(idem.Header, "k")
				if f.account != "" {
					r.Header.Set("X-Account", f.account)
				}
				if f.xff != "" {
					r.Header.Set("X-Forwarded-For", f.xff)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				return rec
			}
			if got := send(tc.first); got.Code != http.StatusUnauthorized {
				t.Fatalf("first: got %d, want 401", got.Code)
			}
			second := send(tc.second)
			replayed := second.Header().Get(idem.ReplayedHeader) == "true"
			switch {
			case tc.wantReplay && (!replayed || second.Code != http.StatusUnauthorized):
				t.Errorf("second: got %d replayed=%v, want the first's 401 replayed (one scope)", second.Code, replayed)
			case !tc.wantReplay && (replayed || second.Code != http.StatusCreated):
				t.Errorf("second: got %d replayed=%v, want the handler's 201 (another scope)", second.Code, replayed)
			}
		})
	}
}

// chi's middleware.RealIP rewrites RemoteAddr from headers any client can
// forge, and a forged address picks another client's scope. The middleware
// cannot undo it, but says so, once.
func TestRealIPIsLogged(t *testing.T) {
	logs := testkit.CaptureDefaultLog(t)
	m := idem.New(newPool(t, porchOptions()), openStore(t, envConfig{}.store), idem.Options{})
	h := middleware.RealIP(m.Handler(new(orders)))
	for _, xff := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
		r := keyed("one", "k")
		r.Header.Set("X-Forwarded-For", xff)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if n := strings.Count(logs.String(), "middleware.RealIP"); n != 1 {
		t.Fatalf("got %d warnings naming middleware.RealIP, want 1:\n%s", n, logs)
	}
}
