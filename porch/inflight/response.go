package inflight

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/fail"
)

// Problem types the limiter answers with.
const (
	problemLimited     = "https://porch.dev/problems/inflight-limited"
	problemUnavailable = "https://porch.dev/problems/inflight-unavailable"
	problemKeyFailed   = "https://porch.dev/problems/inflight-key-failed"
)

// retryAfter is a refusal's Retry-After: when a slot frees is the other
// requests' business, and a second is the shortest the header says.
const retryAfter = time.Second

// refusal is the 429 of a request whose key has every slot in use.
func (l *Limiter) refusal() *porch.Response {
	res := porch.Problem{
		Type:   problemLimited,
		Title:  "Too Many Requests",
		Status: http.StatusTooManyRequests,
		Detail: "at most " + strconv.FormatInt(l.limit, 10) + " requests of this client may be in flight at once",
	}.Response()
	l.setHeaders(res.Header, 0)
	res.Header.Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	return res
}

// failure is the answer to a request no slot could be taken for: 500 when
// the application's KeyFunc failed, else the fail-closed 503.
func (l *Limiter) failure(r *http.Request, err error) *porch.Response {
	var ke *keyError
	if errors.As(err, &ke) {
		errlog.Error(r.Context(), "inflight: could not key a request", "limiter", l.opt.Name, "err", err)
		return porch.Problem{
			Type:   problemKeyFailed,
			Title:  "Internal Server Error",
			Status: http.StatusInternalServerError,
			Detail: "the in-flight limiter could not tell what to count this request against",
		}.Response()
	}
	return porch.Unavailable(problemUnavailable, fail.Detail(l.errs, r, "take an in-flight slot for this request", err), retryAfter)
}

// setHeaders writes the IETF RateLimit fields, with free slots left. They
// are added beside a rate limiter's own, as the draft lists policies.
func (l *Limiter) setHeaders(h http.Header, free int64) {
	h.Add("RateLimit-Policy", l.policy[0])
	h.Add("RateLimit", l.rlQuote+strconv.FormatInt(max(free, 0), 10))
}
