package rate

import (
	"context"
	"net/http"
)

// counted is the context a limiter's mount hands on once it has counted a
// request, recording the client key it counted and the verdict: a mount of
// the same limiter further in (r.Use(lim.Handler) and porch.Chain(lim, keys)
// on one route, or lim both alone and in a Set) that keys the request the
// same finds it and passes the request on instead of counting it again,
// and After finds the verdict to report in it. It wraps its parent itself,
// rather than going into a context.WithValue, so that recording costs one
// allocation, not two.
//
// The record is the request's context, not anything of the *http.Request:
// every copy a middleware makes keeps the context (r.WithContext,
// r.Clone, httputil.ReverseProxy's outgoing request), while a Clone
// replaces the header map and the URL; idem's mark of a key its request
// owns is kept the same way. A sub-request an application builds on the
// same context keeps it too, which is why the record names the key: a
// sub-request for another client is that client's request, and counted as
// one (see countedAs); one for the same client is the request again, until
// CountAgain says otherwise.
type counted struct {
	context.Context
	l *Limiter
	v Verdict
	// through marks the record of a mount that passed the request on: its
	// After leaves the headers (and the give-back) to the mount that
	// counted, whose verdict it would otherwise write over a Set's report
	// of it.
	through bool
	// h is the hit this mount counted. Its key is the one a mount further
	// in matches (see countedAs): "" on the record of a mount that counted
	// nothing (see passOn), which no key matches. Its window and weight are
	// set on a chain's record only, whose After gives it back when the
	// final status does not count (see Options.CountStatus); Handler and
	// a Set give back their own. One field for both keeps the record,
	// which every counted request allocates, in the size class it had
	// before it named a key.
	h hit
}

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
// the one of a count of key: the request's client was counted by that
// limiter on this context already. It is nil for another client's
// request, a sub-request a batch endpoint replays for another user, which
// is counted as that user's. c may be nil.
func (c *counted) countedAs(key string) *counted {
	for ; c != nil; c = recordOf(c.Context, c.l) {
		if c.h.key == key {
			return c
		}
	}
	return nil
}

// passOn hands r on from a mount of l that counts nothing of it (it
// skipped it, failed, or found it counted further out), given prior, the
// innermost record of l on r (countOf). When a mount of l further out left
// a record that counts, r gets one that does not, so that After does not
// settle and report the other mount's count as its own: a single mount
// that skips or fails r reports nothing.
func (l *Limiter) passOn(r *http.Request, prior *counted) *http.Request {
	if prior == nil || prior.through {
		return r
	}
	return r.WithContext(&counted{Context: r.Context(), l: l, through: true})
}

// CountAgain returns a copy of ctx on which every limiter counts a request
// anew: the context of a sub-request of the same client that is to be
// counted as a request of its own, such as each operation a batch endpoint
// replays through its router for the caller.
//
// A limiter counts a request once per client key, however often the route
// mounts it and whatever copies middlewares make of it (r.WithContext,
// r.Clone): the mark of its count is in the request's context, with the
// key it counted. A request built on that context (with
// http.NewRequestWithContext, r.WithContext or r.Clone) for another key
// (another user, another address) is counted as that key's; one for the
// same key is the request again, and passes every mount of that limiter
// uncounted. On CountAgain's context it is counted, against the key its
// KeyFunc names, once however often the route mounts the limiter; the
// request it came from keeps its own count and headers.
//
//	op, _ := http.NewRequestWithContext(rate.CountAgain(r.Context()), http.MethodPost, "/orders", body)
//	router.ServeHTTP(rec, op)
//
// It hides the marks of every limiter, Set and Tiered, and nothing else of
// ctx: values, deadline and cancellation are ctx's.
func CountAgain(ctx context.Context) context.Context {
	return &countAgain{ctx}
}

// countAgain is CountAgain's context: it answers the keys under which this
// package marks a request as nil, so that a mount on a sub-request finds
// none of the marks of the request it came from.
type countAgain struct{ context.Context }

func (c *countAgain) Value(key any) any {
	switch key.(type) {
	case countedKey, setKey, tierKey:
		return nil
	}
	return c.Context.Value(key)
}
