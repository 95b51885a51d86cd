package rate

import (
	"context"
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch"
)

// Before counts the request against every limiter of the set. A refusal
// short-circuits with the refusing limiter's 429; a failure with its 503,
// 500 or 413. It implements porch.Middleware.
func (s *Set) Before(r *http.Request) (*http.Request, *porch.Response) {
	d, ms := s.countAll(r)
	if errors.Is(d.err, porch.ErrSkip) {
		return s.passOn(r), nil
	}
	if d.err != nil {
		return s.passOn(r), d.lim.failure(r, d.err)
	}
	if !d.v.Allowed {
		r = r.WithContext(context.WithValue(r.Context(), setKey{s}, d))
		return r, s.refusal(r, d)
	}
	if s.settles {
		d.settle = ms
	}
	uri := requestURI(r)
	return handOn(r, context.WithValue(withCounts(r.Context(), ms, uri), setKey{s}, d), uri), nil
}

// passOn hands on a request s counts nothing of here (every limiter
// skipped it or counted it further out, or one failed it) so that After
// finds no decision: a chain of s further out that counted the request
// settles and reports it itself, and settling it here too would give its
// hits back twice, or another client's.
func (s *Set) passOn(r *http.Request) *http.Request {
	if r.Context().Value(setKey{s}) == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), setKey{s}, nil))
}

// After puts the set's rate-limit headers on the final response, unless
// another middleware or the handler refused it (see Limiter.After), and
// gives back the hits whose limiter's Options.CountStatus does not count
// its status. It implements porch.Middleware.
func (s *Set) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	d, ok := r.Context().Value(setKey{s}).(decision)
	if !ok {
		return // s counted nothing of r here
	}
	settleMembers(d.settle, res.StatusCode())
	if refusedByOther(res, d.v.Allowed) {
		return
	}
	if res.Header == nil {
		res.Header = make(http.Header)
	}
	s.setHeaders(res.Header, d)
}

// Handler is the set as plain chi middleware. Unlike a porch chain it does
// not buffer the response: headers are set before next runs.
func (s *Set) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ms := s.countAll(r)
		switch {
		case errors.Is(d.err, porch.ErrSkip):
			next.ServeHTTP(w, r)
		case d.err != nil:
			d.lim.failure(r, d.err).Write(w)
		case !d.v.Allowed:
			s.refusal(r, d).Write(w)
		default:
			s.setHeaders(w.Header(), d)
			uri := requestURI(r)
			if ctx := withCounts(r.Context(), ms, uri); ctx != r.Context() {
				r = handOn(r, ctx, uri)
			}
			if !s.settles {
				next.ServeHTTP(w, r)
				return
			}
			serveSettling(next, w, r, func(status int) { settleMembers(ms, status) })
		}
	})
}

// refusal is the refusing limiter's 429 (or its Options.LimitResponse),
// announcing every policy of the set.
func (s *Set) refusal(r *http.Request, d decision) *porch.Response {
	res := d.lim.refusal(r, d.v)
	s.setHeaders(res.Header, d)
	return res
}

// setHeaders writes the reported limiter's headers (see Set), the set's
// RateLimit-Policy and, when a dry-run limiter counted, X-RateLimit-Dry-Run.
func (s *Set) setHeaders(h http.Header, d decision) {
	d.lim.setHeaders(h, d.v)
	h[hdrPolicy] = s.policyValue
	if d.dry != nil {
		h[hdrDryRun] = d.dry
	}
}

// settleMembers gives back, for a request the set served with the final
// status, the hit of each member whose Options.CountStatus does not count
// it. A member that counted the request further out settles it there.
func settleMembers(ms []member, status int) {
	for i := range ms {
		if m := &ms[i]; m.given() {
			m.l.settle(countedHit{key: m.key, start: m.start, n: m.n}, m.v, status)
		}
	}
}
