package porch

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/internal/clientip"
)

// KeyFunc names the principal a porch middleware keys a request by: what
// rate.Options.KeyFunc counts it against, what idem.Options.Principal
// scopes its idempotency keys under (an API key, a user id, a route, or
// several of these joined by [JoinKeys]).
//
// It returns one of three answers:
//   - a principal and nil: the request is keyed by that principal;
//   - "" and nil: the request is keyed by its client address, as with no
//     KeyFunc (so that requests without a principal are keyed per client,
//     not all together under one key);
//   - an error: [ErrSkip] exempts the request from the middleware, which
//     serves it as if it were not there; any other error fails the request
//     closed with a 500, since serving it unkeyed would make a failing
//     lookup a way around the middleware.
//
// A KeyFunc runs on the request's goroutine before the middleware decides;
// it may block (a session lookup), under r.Context().
type KeyFunc func(r *http.Request) (string, error)

// ErrSkip is returned by a KeyFunc to exempt a request from a middleware: a
// health check, an allowlisted client, an internal caller. A limiter serves
// it uncounted and without rate-limit headers; idempotency serves it
// without looking at its key. Return it only for requests a client cannot
// make exempt by choice (a header it can set is no allowlist).
var ErrSkip = errors.New("porch: request exempt from the middleware")

// ErrNoRoute is returned by [KeyByRoute] when the request's route pattern
// is not known yet: the limiter runs before chi has routed the request.
var ErrNoRoute = errors.New("porch: KeyByRoute needs chi's route pattern: mount the limiter with r.With, r.Group or inside r.Route, not on the top router's Use")

// KeyByIP keys a request by the connection's peer address (an IPv6 client by
// its /64), as porch's middlewares do by default with their TrustProxy
// option off. It is for composing with [JoinKeys]: JoinKeys(KeyByIP,
// KeyByRoute) keys each client per route. It never reads X-Forwarded-For.
// A request with no RemoteAddr (built in-process with http.NewRequest)
// fails it, rather than share the key "" with every other such request:
// the middleware answers 500, as for any KeyFunc error.
func KeyByIP(r *http.Request) (string, error) {
	return addrKey(r, false)
}

// KeyByClientIP keys a request by the client address chi's client-IP
// middleware resolved (middleware.ClientIPFromXFFTrustedProxies and
// friends), falling back to the peer, as porch's middlewares do with their
// TrustProxy option on. Use it only behind a proxy you control (see
// rate.Options.TrustProxy). A request that names no address at all
// fails it, as it fails KeyByIP.
func KeyByClientIP(r *http.Request) (string, error) {
	return addrKey(r, true)
}

// addrKey is KeyByIP's and KeyByClientIP's key, or errNoAddr for a
// request that names no client: every such request would share one key.
func addrKey(r *http.Request, trustProxy bool) (string, error) {
	key, _ := clientip.Key(r, trustProxy)
	if key == "" {
		return "", errNoAddr
	}
	return key, nil
}

// errNoAddr is what KeyByIP and KeyByClientIP return for a request with no
// client address: RemoteAddr is empty, as on a request built with
// http.NewRequest (a sub-request, a test). Keyed as "", every such request
// would share one counter or one idempotency scope; a middleware fails it
// closed, as any KeyFunc error.
var errNoAddr = errors.New("porch: the request has no client address to key it by (RemoteAddr is empty): set it on a request built in-process")

// KeyByHeader keys a request by the value of header name, "" when it is
// absent (so the request is keyed by client address). Use it for a header
// that something you trust has checked or set: an API key your
// authentication middleware verified, a user id your gateway put there. A
// header the client chooses freely lets it pick a fresh counter per request.
func KeyByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) { return r.Header.Get(name), nil }
}

// KeyByRoute keys a request by its method and chi route pattern
// ("GET /orders/{id}"), so that every path of one route shares a counter and
// a client cannot get fresh counters by varying the path. chi knows the
// pattern only once it has routed the request: mount the limiter with
// r.With, r.Group or inside r.Route. Before routing it fails with
// [ErrNoRoute] rather than fall back to the raw path.
func KeyByRoute(r *http.Request) (string, error) {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "", ErrNoRoute
	}
	pattern := rc.RoutePattern()
	if pattern == "" {
		return "", ErrNoRoute
	}
	return r.Method + " " + pattern, nil
}

// JoinKeys composes key functions: the request's principal is every part,
// in order, joined so that no two distinct lists of parts give the same key
// (each part is length-prefixed). JoinKeys(KeyByHeader("X-User-Id"),
// KeyByRoute) keys each user per route; JoinKeys(KeyByIP, KeyByRoute) each
// client per route.
//
// The first error, [ErrSkip] included, is returned as it is. If any part is
// "", the whole key is "", and the request is keyed by client address
// alone: a missing part would otherwise put every request lacking it under
// one shared key.
//
// JoinKeys panics, with a "porch: " message, if given no function or a nil
// one.
func JoinKeys(parts ...KeyFunc) KeyFunc {
	if len(parts) == 0 {
		panic("porch: JoinKeys expects at least one KeyFunc")
	}
	for i, p := range parts {
		if p == nil {
			panic("porch: JoinKeys expects non-nil KeyFuncs, got nil at " + strconv.Itoa(i))
		}
	}
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for _, p := range parts {
			k, err := p(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", nil
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String(), nil
	}
}
