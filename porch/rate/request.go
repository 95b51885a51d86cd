package rate

import (
	"errors"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
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
func (l *Limiter) countResolved(r *http.Request, key string, n int64, err error) (Verdict, countedHit, error) {
	var v Verdict
	var start time.Time
	if err == nil {
		v, start, err = l.allowAt(r.Context(), key, n)
	}
	if l.opt.DryRun {
		v, err = l.dryRun(r, key, n, v, err)
	}
	return v, countedHit{key: key, start: start, n: n}, err
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
