package rate

import (
	"context"
	"net/http"
)

// counted is the context a limiter's mount hands on once it has counted a
// request, recording the client key it counted, the request's
// RequestURI and the verdict: a mount of the same limiter further in
// (r.Use(lim.Handler) and porch.Chain(lim, keys) on one route, or lim both
// alone and in a Set) that finds the same key and the same RequestURI
// passes the request on instead of counting it again, and After finds the
// verdict to report in it. It wraps its parent itself, rather than going
// into a context.WithValue, so that recording costs one allocation, not
// two.
//
// The record is the request's context, not anything of the *http.Request:
// every copy a middleware makes keeps the context (r.WithContext,
// r.Clone, http.StripPrefix, httputil.ReverseProxy's outgoing request),
// while a Clone replaces the header map and the URL; idem's mark of a key
// its request owns is kept the same way. A sub-request an application
// builds on the same context keeps it too, which is why the record names
// the key and the RequestURI, the raw request-target the server read,
// which every copy keeps and http.NewRequest leaves empty (see
// countedAs): a sub-request for another client is that client's request;
// one built with http.NewRequestWithContext is a request of its own; a
// copy with the same key and RequestURI is the request again, until
// CountAgain says otherwise.
type counted struct {
	context.Context
	l *Limiter
	v Verdict
	// h is the hit this mount counted. Its key is the one a mount further
	// in matches (see countedAs): "" on the record of a mount that counted
	// nothing (see passOn). Its window and weight are
	// set on a chain's record only, whose After gives it back when the
	// final status does not count (see Options.CountStatus); Handler and
	// a Set give back their own. One field for both keeps the record,
	// which every counted request allocates, in the 160-byte size class.
	h countedHit
	// uri is the RequestURI of the request counted (see requestURI),
	// which a mount further in matches as well as the key; "" on the
	// record of a mount that passed the request on (see passOn), whose
	// After leaves the headers (and the give-back) to the mount that
	// counted, whose verdict it would otherwise write over a Set's report
	// of it. One field for both, as for the hit.
	uri string
}

// passed reports whether c is the record of a mount that passed its
// request on, counting nothing of it.
func (c *counted) passed() bool { return c.uri == "" }

type countedKey struct{}

// Value answers countedKey with c, and anything else as c's parent does.
func (c *counted) Value(key any) any {
	if _, ok := key.(countedKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// countOf finds, in r's context, the innermost record a mount of l left,
// or nil if no mount of l has seen r's context (or CountAgain hid them).
// On a route that mounts l once it is nil, and costs one Value lookup.
func countOf(r *http.Request, l *Limiter) *counted {
	return recordOf(r.Context(), l)
}

func recordOf(ctx context.Context, l *Limiter) *counted {
	for {
		c, _ := ctx.Value(countedKey{}).(*counted)
		if c == nil || c.l == l {
			return c
		}
		ctx = c.Context
	}
}

// countedAs finds, among c and the records of c's limiter further out,
// the one of a count of key for r's RequestURI: r, or a copy of it a
// middleware made, was counted by that limiter on this context already.
// It is nil for another client's request, a sub-request a batch endpoint
// replays for another user, which is counted as that user's; and for a
// request with another RequestURI or none, one the application built
// with http.NewRequest on this context, which is counted as a request of
// its own. c may be nil.
func (c *counted) countedAs(key string, r *http.Request) *counted {
	for ; c != nil; c = recordOf(c.Context, c.l) {
		if c.h.key == key && c.uri == r.RequestURI && !c.passed() {
			return c
		}
	}
	return nil
}

// requestURI is what a record of r's count matches further in: r's
// RequestURI, or for a request built in-process, which has none
// (http.NewRequest leaves it empty), the one a server would have read.
// A mount that records it hands r on with it (see handOn), so that a copy
// further in matches while a request built anew on r's context does not.
func requestURI(r *http.Request) string {
	switch {
	case r.RequestURI != "":
		return r.RequestURI
	case r.URL == nil: // never served by a router; still not a record that passed
		return "*"
	}
	return r.URL.RequestURI() // "/" at least
}

// handOn is r with ctx, the context of a mount that recorded uri
// (requestURI) for r: with uri as its RequestURI.
func handOn(r *http.Request, ctx context.Context, uri string) *http.Request {
	r = r.WithContext(ctx)
	r.RequestURI = uri
	return r
}

// passOn hands r on from a mount of l that counts nothing of it (it
// skipped it, failed, or found it counted further out), given prior, the
// innermost record of l on r (countOf). When a mount of l further out left
// a record that counts, r gets one that does not, so that After does not
// settle and report the other mount's count as its own: a single mount
// that skips or fails r reports nothing.
func (l *Limiter) passOn(r *http.Request, prior *counted) *http.Request {
	if prior == nil || prior.passed() {
		return r
	}
	return r.WithContext(&counted{Context: r.Context(), l: l}) // passed: no uri
}
