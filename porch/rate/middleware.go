package rate

import (
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch"
)

// Before counts the request. A refusal short-circuits with 429; a failure
// with 503. A request l has counted already, mounted further out on the
// route, passes on uncounted: the same client key and the same
// RequestURI, as every copy a middleware makes of a request has. One for
// another key is counted against its own, and one with another
// RequestURI or none (built with http.NewRequest) as a request of its
// own. It implements porch.Middleware.
func (l *Limiter) Before(r *http.Request) (*http.Request, *porch.Response) {
	prior := countOf(r, l)
	key, n, err := l.resolve(r)
	if err == nil && prior.countedAs(key, r) != nil {
		return l.passOn(r, prior), nil
	}
	v, h, err := l.countResolved(r, key, n, err)
	if errors.Is(err, porch.ErrSkip) {
		return l.passOn(r, prior), nil
	}
	if err != nil {
		return l.passOn(r, prior), l.failure(r, err)
	}
	uri := requestURI(r)
	r = handOn(r, &counted{Context: r.Context(), l: l, v: v, h: h, uri: uri}, uri)
	if !v.Allowed && !v.DryRun {
		return r, l.refusal(r, v)
	}
	return r, nil
}

// After puts the rate-limit headers on the final response, and gives the
// request's hit back if Options.CountStatus does not count its status. It
// implements porch.Middleware.
//
// A 429 with Retry-After that this limiter did not make (a limiter after it
// in the chain refused, or the handler did) is left as it is: its
// Retry-After is another policy's, and this one's X-RateLimit-* beside it
// would contradict it. Use All to count one request against several
// limits. A mount that passed the request on (see Before) leaves the
// headers, and the give-back, to the one that counted it.
func (l *Limiter) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	c := countOf(r, l)
	if c != nil && !c.passed() {
		l.settle(c.h, c.v, res.StatusCode())
	}
	if c != nil && !c.passed() && !refusedByOther(res, c.v.Allowed || c.v.DryRun) {
		if res.Header == nil {
			res.Header = make(http.Header)
		}
		l.setHeaders(res.Header, c.v)
	}
}

// Handler is the limiter as plain chi middleware. Unlike a porch chain it
// does not buffer the response: headers are set before next runs. A request
// l has counted already, mounted further out on the route, passes on
// uncounted, with the headers that mount set; which requests those are,
// and which are counted anew, Before says.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, n, err := l.resolve(r)
		if err == nil && countOf(r, l).countedAs(key, r) != nil {
			next.ServeHTTP(w, r)
			return
		}
		v, h, err := l.countResolved(r, key, n, err)
		if errors.Is(err, porch.ErrSkip) {
			next.ServeHTTP(w, r)
			return
		}
		if err != nil {
			l.failure(r, err).Write(w)
			return
		}
		if !v.Allowed && !v.DryRun {
			l.refusal(r, v).Write(w)
			return
		}
		l.setHeaders(w.Header(), v)
		uri := requestURI(r)
		r = handOn(r, &counted{Context: r.Context(), l: l, v: v, h: countedHit{key: key}, uri: uri}, uri) // the give-back is serveSettling's
		if l.opt.CountStatus == nil || !v.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		serveSettling(next, w, r, func(status int) { l.settle(h, v, status) })
	})
}
