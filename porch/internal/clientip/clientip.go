// Package clientip names the client of a request the way porch's
// middlewares key it by default: the rate limiter counts per client, and
// idempotency scopes keys per client when no principal is known. Both must
// agree on who a client is and on what a client cannot forge.
package clientip

import (
	"net/http"
	"net/netip"

	"github.com/go-chi/chi/v5/middleware"
)

// Key is the client's address: the IP, an IPv6 client reduced to its /64
// (one subscriber usually holds a whole /64, so a per-address key would be
// trivially evaded).
//
// With trustProxy off it reads only r.RemoteAddr, the connection's peer,
// which a client cannot forge; X-Forwarded-For is never read. With
// trustProxy on it takes the address chi's client-IP middleware resolved
// (middleware.ClientIPFromXFF and friends), falling back to the peer when
// that middleware resolved none.
//
// rewritten reports that the key came from a RemoteAddr without a port.
// net/http always sets host:port, so something rewrote it, almost always
// chi's middleware.RealIP, which copies X-Forwarded-For, X-Real-IP or
// True-Client-IP into it: headers any client can forge, which silently
// defeats trustProxy off.
func Key(r *http.Request, trustProxy bool) (key string, rewritten bool) {
	var buf [64]byte // an IPv6 /64 prefix fits
	b, rewritten := AppendKey(buf[:0], r, trustProxy)
	return string(b), rewritten
}

// AppendKey appends Key's key to dst, for a caller that puts it after a
// prefix: one allocation for the whole string instead of two.
func AppendKey(dst []byte, r *http.Request, trustProxy bool) (_ []byte, rewritten bool) {
	if trustProxy {
		if ip := middleware.GetClientIPAddr(r.Context()); ip.IsValid() {
			return appendAddrKey(dst, ip), false
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		if ip, err := netip.ParseAddr(r.RemoteAddr); err == nil {
			return appendAddrKey(dst, ip), true
		}
		return append(dst, r.RemoteAddr...), false // not an IP (a unix socket, a test): key on it as given
	}
	return appendAddrKey(dst, ap.Addr()), false
}

func appendAddrKey(dst []byte, ip netip.Addr) []byte {
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.AppendTo(dst)
	}
	p, err := ip.Prefix(64)
	if err != nil { // only for an invalid address, which callers never pass
		return ip.AppendTo(dst)
	}
	return p.AppendTo(dst)
}

// RewrittenWarning is what a middleware logs, once, when Key reports a
// rewritten RemoteAddr.
const RewrittenWarning = "the request's RemoteAddr has no port, so a middleware rewrote it, most likely chi's " +
	"middleware.RealIP from X-Forwarded-For, X-Real-IP or True-Client-IP, which any client can forge " +
	"to pose as any other: remove it, and behind a proxy you control use " +
	"middleware.ClientIPFromXFFTrustedProxies with TrustProxy instead"

// AddrKey is Key's key for a client named by addr, as an operator has it:
// an IP, an IP with a port, or an IPv6 /64 prefix as Key prints it. addr
// that is none of these is the key as given, as Key keys such a peer.
func AddrKey(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return string(appendAddrKey(nil, ap.Addr()))
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		return string(appendAddrKey(nil, ip))
	}
	if p, err := netip.ParsePrefix(addr); err == nil && p.Addr().Is6() && p.Bits() == 64 {
		return string(appendAddrKey(nil, p.Addr()))
	}
	return addr
}
