package rate

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/fail"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
)

// Problem types of the requests the limiter cannot count.
const (
	// problemKeyFailed answers 500 when Options.KeyFunc fails, or
	// Options.Weight returns less than 1.
	problemKeyFailed = "https://porch.dev/problems/rate-key-failed"
	// problemOverLimit answers 413 when a request's weight exceeds the
	// limit (see ErrOverLimit).
	problemOverLimit = "https://porch.dev/problems/rate-weight-over-limit"
)

// failure is the answer to a request count failed on: 500 for the
// application's KeyFunc or Weight, 413 for a weight no window allows, and
// the fail-closed 503 for the rest.
func (l *Limiter) failure(r *http.Request, err error) *porch.Response {
	var ke *keyError
	switch {
	case errors.As(err, &ke):
		return l.internal(r, err, "the rate limiter could not tell what to count this request against")
	case errors.Is(err, ErrWeight):
		return l.internal(r, err, "the rate limiter could not weigh this request")
	case errors.Is(err, ErrOverLimit):
		return porch.Problem{
			Type:   problemOverLimit,
			Title:  "Content Too Large",
			Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("this request costs more than the limit of %d per %s, so it can never be allowed", l.limit, l.window),
		}.Response()
	}
	return l.unavailable(r, err)
}

// internal is the 500 for a request the application's KeyFunc or Weight
// failed on. The error is logged, not sent: it is the server's.
func (l *Limiter) internal(r *http.Request, err error, detail string) *porch.Response {
	errlog.Error(r.Context(), "rate: could not key or weigh a request", "limiter", l.opt.Name, "err", err)
	return porch.Problem{
		Type:   problemKeyFailed,
		Title:  "Internal Server Error",
		Status: http.StatusInternalServerError,
		Detail: detail,
	}.Response()
}

// Problem types this package answers with. Options.ProblemBase moves them
// under another URI.
const (
	problemLimited     = "https://porch.dev/problems/rate-limited"
	problemUnavailable = "https://porch.dev/problems/rate-unavailable"
)

// refusal is the 429 for v, or what Options.LimitResponse renders in its
// place: Retry-After is the time until this key's window closes, not the
// whole window.
func (l *Limiter) refusal(r *http.Request, v Verdict) *porch.Response {
	var res *porch.Response
	if l.opt.LimitResponse != nil {
		res = l.opt.LimitResponse(r, v)
	}
	if res != nil {
		res = own(res)
	} else {
		res = porch.Problem{
			Type:   problemtype.Under(l.opt.ProblemBase, problemLimited),
			Title:  "Too Many Requests",
			Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("limit of %d requests per %s reached", v.Limit, l.window),
		}.Response()
	}
	if res.Status == 0 {
		res.Status = http.StatusTooManyRequests
	}
	if res.Header == nil {
		res.Header = make(http.Header)
	}
	l.setHeaders(res.Header, v) // Retry-After included
	return res
}

// unavailable is the fail-closed answer, or what Options.ErrorResponse
// renders in its place: the request was not counted, so it must not be
// served.
func (l *Limiter) unavailable(r *http.Request, err error) *porch.Response {
	def := porch.Unavailable(problemtype.Under(l.opt.ProblemBase, problemUnavailable), fail.Detail(l.errs, r, "count this request", err), time.Second)
	if l.opt.ErrorResponse == nil {
		return def
	}
	res := l.opt.ErrorResponse(r, err)
	if res == nil {
		return def
	}
	res = own(res)
	if res.Status == 0 {
		res.Status = http.StatusServiceUnavailable
	}
	if res.Header.Get("Retry-After") == "" {
		res.SetHeader("Retry-After", def.Header.Get("Retry-After"))
	}
	return res
}

// own copies what an Options callback returned before the limiter adds its
// headers: a callback may hand every request one shared response.
func own(res *porch.Response) *porch.Response {
	return &porch.Response{Status: res.Status, Header: res.Header.Clone(), Body: res.Body}
}

// refusedByOther reports whether res is a 429 with Retry-After that a
// middleware, a limiter or the handler other than the one about to report
// made, for a request that one allowed: its headers then belong to the
// refusal, and another policy's beside them would contradict its
// Retry-After.
func refusedByOther(res *porch.Response, allowed bool) bool {
	return allowed && res.Status == http.StatusTooManyRequests && res.Header.Get("Retry-After") != ""
}
