package rate_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

func TestForwardedFor(t *testing.T) {
	type hit struct {
		xff        string // X-Forwarded-For sent by the client; "" for none
		wantStatus int
	}
	tests := []struct {
		name       string
		trustProxy bool
		hits       []hit
	}{
		{
			// chi's middleware runs and resolves an address, but the limiter
			// was not told to trust it: the peer is the key.
			name: "trust off ignores a forged header",
			hits: []hit{
				{"203.0.113.1", http.StatusOK},
				{"203.0.113.2", http.StatusTooManyRequests},
				{"", http.StatusTooManyRequests},
			},
		},
		{
			name:       "trust on keys by the proxy's client",
			trustProxy: true,
			hits: []hit{
				{"203.0.113.1", http.StatusOK},
				{"203.0.113.2", http.StatusOK},
				{"198.51.100.9, 203.0.113.1", http.StatusTooManyRequests}, // the proxy appended .1
				{"", http.StatusOK},                                       // nothing resolved: back to the peer
				{"", http.StatusTooManyRequests},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{TrustProxy: tt.trustProxy}})
			r := chi.NewRouter()
			r.Use(middleware.ClientIPFromXFFTrustedProxies(1))
			r.Use(rg.lim.Handler)
			r.Get("/", (&counted{}).ServeHTTP)
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)

			for i, h := range tt.hits {
				req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				if h.xff != "" {
					req.Header.Set("X-Forwarded-For", h.xff)
				}
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != h.wantStatus {
					t.Errorf("request %d (X-Forwarded-For %q): got status %d, want %d", i+1, h.xff, res.StatusCode, h.wantStatus)
				}
			}
		})
	}
}

func TestKeyByClientAddress(t *testing.T) {
	rg := newRig(t, 1, time.Minute, rigOptions{})
	tests := []struct {
		name     string
		a, b     string // RemoteAddr of two requests
		wantSame bool
	}{
		{"same IPv4 address, other port", "192.0.2.1:1000", "192.0.2.1:2000", true},
		{"other IPv4 address", "192.0.2.1:1000", "192.0.2.2:1000", false},
		{"IPv6 in the same /64", "[2001:db8:1:2::1]:443", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:80", true},
		{"IPv6 in another /64", "[2001:db8:1:2::1]:443", "[2001:db8:1:3::1]:443", false},
		{"IPv4-mapped IPv6 is the IPv4 client", "[::ffff:192.0.2.1]:1", "192.0.2.1:2", true},
		{"IPv6 zone is ignored", "[fe80::1%eth0]:1", "[fe80::2]:1", true},
		{"address without a port", "192.0.2.1", "192.0.2.1:80", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := rg.lim.CounterKey(request(tt.a)), rg.lim.CounterKey(request(tt.b))
			if (ka == kb) != tt.wantSame {
				t.Errorf("got keys %q and %q, want same = %v", ka, kb, tt.wantSame)
			}
		})
	}
}

func TestIPv6SubnetSharesALimit(t *testing.T) {
	rg := newRig(t, 1, time.Minute, rigOptions{})
	h := rg.lim.Handler(&counted{})
	for i, hit := range []struct {
		addr       string
		wantStatus int
	}{
		{"[2001:db8::1]:1", http.StatusOK},
		{"[2001:db8::2]:1", http.StatusTooManyRequests},
		{"[2001:db8:0:1::1]:1", http.StatusOK},
	} {
		if res, _ := serve(h, request(hit.addr)); res.StatusCode != hit.wantStatus {
			t.Errorf("request %d from %s: got status %d, want %d", i+1, hit.addr, res.StatusCode, hit.wantStatus)
		}
	}
}

func TestKeyPrincipal(t *testing.T) {
	principal := porch.KeyByHeader("X-API-Key")
	rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{KeyFunc: principal}})
	req := func(addr, apiKey string) *http.Request {
		r := request(addr)
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		return r
	}
	tests := []struct {
		name     string
		a, b     *http.Request
		wantSame bool
	}{
		{"one principal from two addresses", req("192.0.2.1:1", "alice"), req("198.51.100.1:1", "alice"), true},
		{"two principals from one address", req("192.0.2.1:1", "alice"), req("192.0.2.1:1", "bob"), false},
		{"no principal falls back to the address", req("192.0.2.1:1", ""), req("192.0.2.1:2", ""), true},
		{"no principal, two addresses", req("192.0.2.1:1", ""), req("198.51.100.1:1", ""), false},
		{"a principal never collides with an address", req("192.0.2.1:1", "ip:192.0.2.1"), req("192.0.2.1:1", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := rg.lim.CounterKey(tt.a), rg.lim.CounterKey(tt.b)
			if (ka == kb) != tt.wantSame {
				t.Errorf("got keys %q and %q, want same = %v", ka, kb, tt.wantSame)
			}
		})
	}

	h := rg.lim.Handler(&counted{})
	if res, _ := serve(h, req("192.0.2.1:1", "alice")); res.StatusCode != http.StatusOK {
		t.Errorf("alice's first request: got status %d, want 200", res.StatusCode)
	}
	if res, _ := serve(h, req("198.51.100.1:1", "alice")); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("alice from another address: got status %d, want 429", res.StatusCode)
	}
}

// chi's middleware.RealIP rewrites RemoteAddr from X-Forwarded-For, so with
// TrustProxy off a client that forges a new header on every request gets a
// new counter each time (5 rotated values all got 200). The limiter cannot
// recover the peer, but it says so, once, naming the middleware.
func TestRealIPIsLogged(t *testing.T) {
	logs := testkit.CaptureDefaultLog(t)

	rg := newRig(t, 1, time.Minute, rigOptions{})
	h := middleware.RealIP(rg.lim.Handler(&counted{}))
	for _, xff := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
		r := request("192.0.2.1:1")
		r.Header.Set("X-Forwarded-For", xff)
		serve(h, r)
	}
	if n := strings.Count(logs.String(), "middleware.RealIP"); n != 1 {
		t.Fatalf("got %d warnings naming middleware.RealIP, want 1:\n%s", n, logs.String())
	}
}
