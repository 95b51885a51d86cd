package rate

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
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

// keyError is a KeyFunc's failure, told apart from the store's.
type keyError struct{ err error }

func (e *keyError) Error() string { return "rate: key function: " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// countResolved counts r as the middleware does, given what resolve named
// for it: against key, by weight n, reported as DryRun says; err is
// resolve's. It returns porch.ErrSkip for a request to serve uncounted and
// without headers, and otherwise the hit, for a take-back once the
// handler's status is known (see Options.CountStatus).
func (l *Limiter) countResolved(r *http.Request, key string, n int64, err error) (Verdict, hit, error) {
	var v Verdict
	var start time.Time
	if err == nil {
		v, start, err = l.allowAt(r.Context(), key, n)
	}
	if l.opt.DryRun {
		v, err = l.dryRun(r, key, n, v, err)
	}
	return v, hit{key: key, start: start, n: n}, err
}

// resolve names r's counter key and weight, or why r cannot be counted.
func (l *Limiter) resolve(r *http.Request) (key string, n int64, err error) {
	key, err = l.key(r)
	if errors.Is(err, porch.ErrSkip) {
		return "", 0, porch.ErrSkip
	}
	if err != nil {
		return "", 0, &keyError{err}
	}
	w := 1
	if l.opt.Weight != nil {
		w = l.opt.Weight(r)
	}
	if err := l.checkWeight(w); err != nil {
		return "", 0, err
	}
	return key, int64(w), nil
}

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
