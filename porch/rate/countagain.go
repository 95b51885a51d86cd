package rate

import (
	"context"
)

// CountAgain returns a copy of ctx on which every limiter counts a request
// anew: the context of a sub-request of the same client that is to be
// counted as a request of its own, such as each operation a batch endpoint
// replays through its router for the caller.
//
// A limiter counts a request once, however often the route mounts it and
// whatever copies middlewares make of it (r.WithContext, r.Clone,
// http.StripPrefix): the mark of its count is in the request's context,
// with the client key it counted and the request's RequestURI, the raw
// request-target the server read, which every copy keeps. A mount further
// in passes a request on uncounted only when its KeyFunc names the same
// key and its RequestURI is the same. So a request built on that context
// is counted, as a request of its own against the key its KeyFunc names,
// when it is for another key (another user, another address) or when it
// was built with http.NewRequestWithContext, which leaves RequestURI
// empty. A copy for the same key (r.WithContext or r.Clone, with its URL
// changed or not) is the request again, and passes every mount of that
// limiter uncounted. On CountAgain's context every request is counted,
// however it was built, once however often the route mounts the limiter;
// the request it came from keeps its own count and headers.
//
//	op, _ := http.NewRequestWithContext(rate.CountAgain(r.Context()), http.MethodPost, "/orders", body)
//	op.RemoteAddr = r.RemoteAddr // a new request has none, and keyed by address one without is a 500
//	router.ServeHTTP(rec, op)
//
// A request with no RequestURI (built in-process with http.NewRequest, as
// a test or an adapter calling ServeHTTP builds it) is handed on by the
// mount that counts it with the one a server would have read,
// r.URL.RequestURI(), so that its copies further in are the request again
// and requests built anew on its context are not.
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
