package rate

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/writeonce/porch-go/porch"
)

// Problem types this package answers with.
const (
	ProblemLimited     = "https://porch.dev/problems/rate-limited"
	ProblemUnavailable = "https://porch.dev/problems/rate-unavailable"
)

type verdictKey struct{ l *Limiter }

// Before counts the request. A refusal short-circuits with 429; a failure
// with 503. It implements porch.Middleware.
func (l *Limiter) Before(r *http.Request) (*http.Request, *porch.Response) {
	v, err := l.allow(r.Context(), l.key(r))
	if err != nil {
		return r, l.unavailable(r, err)
	}
	r = r.WithContext(context.WithValue(r.Context(), verdictKey{l}, v))
	if !v.Allowed {
		res := l.refusal(v)
		return r, res
	}
	return r, nil
}

// After puts the rate-limit headers on the final response. It implements
// porch.Middleware.
func (l *Limiter) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	if v, ok := r.Context().Value(verdictKey{l}).(Verdict); ok {
		if res.Header == nil {
			res.Header = make(http.Header)
		}
		l.setHeaders(res.Header, v)
	}
}

// Handler is the limiter as plain chi middleware. Unlike a porch chain it
// does not buffer the response: headers are set before next runs.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := l.allow(r.Context(), l.key(r))
		if err != nil {
			l.unavailable(r, err).Write(w)
			return
		}
		if !v.Allowed {
			l.refusal(v).Write(w)
			return
		}
		l.setHeaders(w.Header(), v)
		next.ServeHTTP(w, r)
	})
}

// refusal is the 429 for v: Retry-After is the time until this key's window
// closes, not the whole window.
func (l *Limiter) refusal(v Verdict) *porch.Response {
	res := porch.Problem{
		Type:   ProblemLimited,
		Title:  "Too Many Requests",
		Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("limit of %d requests per %s reached", v.Limit, l.window),
	}.Response()
	l.setHeaders(res.Header, v)
	res.Header.Set("Retry-After", strconv.Itoa(porch.RetryAfterSeconds(v.ResetAt.Sub(l.store.Wall()))))
	return res
}

// unavailable is the fail-closed answer: the request was not counted, so it
// must not be served.
func (l *Limiter) unavailable(r *http.Request, err error) *porch.Response {
	return l.errs.FailClosed(r, ProblemUnavailable, "count this request", err)
}
