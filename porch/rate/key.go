package rate

import (
	"net/http"
	"net/netip"

	"github.com/go-chi/chi/v5/middleware"
)

// clientKey is the client half of a counter key: the client IP, an IPv6
// client reduced to its /64 (one subscriber usually holds a whole /64, so a
// per-address key would be trivially evaded).
//
// With trustProxy off it reads only r.RemoteAddr, the connection's peer,
// which a client cannot forge; X-Forwarded-For is never read. With trustProxy
// on it takes the address chi's client-IP middleware resolved
// (middleware.ClientIPFromXFF and friends), falling back to the peer when
// that middleware resolved none.
func clientKey(r *http.Request, trustProxy bool) string {
	if trustProxy {
		if ip := middleware.GetClientIPAddr(r.Context()); ip.IsValid() {
			return addrKey(ip)
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		if ip, err := netip.ParseAddr(r.RemoteAddr); err == nil {
			return addrKey(ip)
		}
		return r.RemoteAddr // not an IP (a unix socket, a test): key on it as given
	}
	return addrKey(ap.Addr())
}

func addrKey(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil { // only for an invalid address, which callers never pass
		return ip.String()
	}
	return p.String()
}
