package rate

import (
	"context"
	"net/http"
)

// counted is the context a limiter's mount hands on once it has counted a
// request, recording the verdict: a mount of the same limiter further in
// (r.Use(lim.Handler) and porch.Chain(lim, keys) on one route, or lim both
// alone and in a Set) finds it and passes the request on instead of
// counting it again, and After finds the verdict to report in it. It wraps
// its parent itself, rather than going into a context.WithValue, so that
// recording costs one allocation, not two.
//
// The record is the request's context, not anything of the *http.Request:
// every copy a middleware makes keeps the context (r.WithContext,
// r.Clone, httputil.ReverseProxy's outgoing request), while a Clone
// replaces the header map and the URL. A sub-request an application
// builds on the same context is therefore part of the request it came
// from, until CountAgain says otherwise; idem's mark of a key its request
// owns is kept the same way.
type counted struct {
	context.Context
	l *Limiter
	v Verdict
	// through marks the record of a mount that passed the request on: its
	// After leaves the headers to the mount that counted, whose verdict it
	// would otherwise write over a Set's report of it.
	through bool
	// h is the hit this mount counted, to give back when the final
	// status does not count (see Options.CountStatus).
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

// countOf finds, in r's context, the innermost record of l's count of r,
// or nil if l has not counted r (or CountAgain hid its count).
func countOf(r *http.Request, l *Limiter) *counted {
	ctx := r.Context()
	for {
		c, _ := ctx.Value(countedKey{}).(*counted)
		if c == nil || c.l == l {
			return c
		}
		ctx = c.Context
	}
}

// CountAgain returns a copy of ctx on which every limiter counts a request
// anew: the context of a sub-request that is to be counted as a request of
// its own, such as each operation a batch endpoint replays through its
// router.
//
// Without it a limiter counts a request once however often the route
// mounts it, and a request built on the context of one it counted (with
// http.NewRequestWithContext, r.WithContext or r.Clone) is that request
// again: it passes every mount of that limiter uncounted, whatever its key.
// With it, each mount counts the sub-request as a client's request would
// be, against the key its KeyFunc names, once however often the route
// mounts the limiter; the request it came from keeps its own count and
// headers.
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
