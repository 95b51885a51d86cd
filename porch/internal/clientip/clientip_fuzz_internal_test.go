package clientip

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/go-chi/chi/v5/middleware"
)

// keyOf runs r through chi's client-IP middleware for one trusted proxy hop,
// as the storefront does with -trust-proxy, and returns Key's answer.
func keyOf(r *http.Request, trustProxy bool) string {
	var key string
	middleware.ClientIPFromXFFTrustedProxies(1)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		key, _ = Key(r, trustProxy)
	})).ServeHTTP(httptest.NewRecorder(), r)
	return key
}

// canonical reports whether key is what addrKey makes: an IPv4 address, or
// an IPv6 /64 with its host bits zero, each in its one canonical spelling.
func canonical(key string) bool {
	if ip, err := netip.ParseAddr(key); err == nil {
		return ip.Is4() && ip.String() == key
	}
	p, err := netip.ParsePrefix(key)
	return err == nil && p.Addr().Is6() && p.Addr().Zone() == "" && p.Bits() == 64 && p.Masked() == p && p.String() == key
}

// FuzzClientKey checks the client address porch keys on (the client half of
// a counter key, the scope of an idempotency key without a principal): without
// TrustProxy it never depends on X-Forwarded-For; a peer or a forwarded
// address always becomes a canonical IPv4 address or IPv6 /64, whatever its
// spelling (a zone, a v4-mapped IPv6 address, a port), so a client cannot
// spell itself into a second key; and every address of one /64 shares its
// key. Only a RemoteAddr that is no IP at all (a unix socket) is keyed as
// given, and a client does not choose it.
func FuzzClientKey(f *testing.F) {
	for _, s := range []struct {
		remote, xff string
		trust       bool
		low         uint64
	}{
		{"192.0.2.1:1234", "", false, 0},
		{"192.0.2.1:1234", "203.0.113.9", false, 1},
		{"192.0.2.1:1234", "203.0.113.9, 198.51.100.1", true, 2},
		{"[2001:db8::1]:443", "", false, 0xffffffffffffffff},
		{"[2001:db8::1%eth0]:443", "", false, 3},
		{"[::ffff:192.0.2.1]:80", "", false, 4},
		{"[fe80::1%25en0]:80", "::ffff:10.0.0.1", true, 5},
		{"192.0.2.1", "2001:db8:1:2:3:4:5:6%zone", true, 6},
		{"@", "not an ip", true, 7},
		{"", ",,, ,", true, 8},
		{"[2001:db8::1]:99999", "", false, 9},
		{"[192.0.2.1]:80", "", false, 10},
	} {
		f.Add(s.remote, s.xff, s.trust, s.low)
	}
	f.Fuzz(func(t *testing.T, remote, xff string, trust bool, low uint64) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		bare := keyOf(r, trust)
		r.Header.Set("X-Forwarded-For", xff)
		key := keyOf(r, trust)
		if !trust && key != bare {
			t.Fatalf("TrustProxy off: key %q with X-Forwarded-For %q, %q without: want it ignored", key, xff, bare)
		}
		peer, ok := peerAddr(remote)
		if !ok && !(trust && key != bare) {
			if key != remote {
				t.Fatalf("RemoteAddr %q is no IP: got key %q, want it as given", remote, key)
			}
			return
		}
		if !canonical(key) {
			t.Fatalf("RemoteAddr %q, X-Forwarded-For %q, trust %v: got key %q, want an IPv4 address or an IPv6 /64", remote, xff, trust, key)
		}
		if !ok || key != bare {
			return // keyed by the forwarded address
		}
		// Another address of the peer's /64, spelled with a port: one key.
		if p := peer.Unmap(); p.Is6() {
			b := p.WithZone("").As16()
			for i := range 8 {
				b[15-i] = byte(low >> (8 * i))
			}
			r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom16(b), 1).String()
			r.Header.Del("X-Forwarded-For")
			if got := keyOf(r, trust); got != key {
				t.Fatalf("RemoteAddr %s, of the /64 of %q: got key %q, want %q", r.RemoteAddr, remote, got, key)
			}
		}
	})
}

// peerAddr is the address in a RemoteAddr, "ip:port" or a bare ip.
func peerAddr(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr(), true
	}
	ip, err := netip.ParseAddr(remote)
	return ip, err == nil
}
