package idem

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/fail"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Problem types this package answers with; clients may switch on them.
// Options.ProblemBase moves them under another URI.
const (
	problemKeyRequired    = "https://porch.dev/problems/idempotency-key-required"
	problemKeyInvalid     = "https://porch.dev/problems/idempotency-key-invalid"
	problemKeyReused      = "https://porch.dev/problems/idempotency-key-reused"
	problemInFlight       = "https://porch.dev/problems/idempotency-in-flight"
	problemBodyTooLarge   = "https://porch.dev/problems/idempotency-body-too-large"
	problemBodyUnreadable = "https://porch.dev/problems/idempotency-body-unreadable"
	problemBodyTimeout    = "https://porch.dev/problems/idempotency-body-timeout"
	problemUnavailable    = "https://porch.dev/problems/idempotency-unavailable"
	problemWriteFailed    = "https://porch.dev/problems/idempotency-write-failed"
	problemBodyInvalid    = "https://porch.dev/problems/idempotency-body-invalid"
	// problemPrincipalFailed: Options.Principal returned an error.
	problemPrincipalFailed = "https://porch.dev/problems/idempotency-principal-failed"
	// problemResponseTooLarge: the handler's answer was larger than
	// Options.MaxStoredBody, so it was withheld and its writes discarded.
	problemResponseTooLarge = "https://porch.dev/problems/idempotency-response-too-large"
)

// problem renders a problem of type typ, one of the problem… constants,
// under Options.ProblemBase.
func (m *Keys) problem(typ string, status int, title, detail string) *porch.Response {
	return porch.Problem{Type: m.problemType(typ), Title: title, Status: status, Detail: detail}.Response()
}

// problemType is typ, one of the problem… constants, under
// Options.ProblemBase.
func (m *Keys) problemType(typ string) string {
	return problemtype.Under(m.opt.ProblemBase, typ)
}

// inFlight is the draft's answer to a duplicate that waited MaxWait for the
// key's owner: 409, and when to retry.
func (m *Keys) inFlight() *porch.Response {
	res := m.problem(problemInFlight, http.StatusConflict, "Request in flight",
		"a request with this "+m.keyHeader+" is still being processed; retry later")
	res.SetHeader("Retry-After", strconv.Itoa(problemtype.RetryAfter(m.opt.MaxWait)))
	return res
}

// unavailable is the fail-closed answer: the handler does not run, or its
// response is withheld because it could not be made durable.
func (m *Keys) unavailable(r *http.Request, err error) *porch.Response {
	if errors.Is(err, driver.ErrNoKeyConn) {
		return porch.Unavailable(m.problemType(problemUnavailable), "no database connection is free to hold this key", time.Second)
	}
	return porch.Unavailable(m.problemType(problemUnavailable), fail.Detail(m.errs, r, "decide or store this key's response", err), time.Second)
}

// writeFailed answers an owner whose own writes failed at commit: its
// response is withheld, since the side effect it reports did not happen.
// The statement's error stays in the log, which a handler failing on every
// request does not flood; it may name tables and values.
func (m *Keys) writeFailed(r *http.Request, err error) *porch.Response {
	m.errs.Error(r.Context(), "idem: the handler's writes failed; nothing was stored",
		"method", r.Method, "path", r.URL.Path, "err", err)
	return m.problem(problemWriteFailed, http.StatusInternalServerError, "Write failed",
		"the request's writes could not be committed, so nothing was done or stored; the handler's answer was withheld")
}

// tooLarge answers an owner whose response body (n bytes) is larger than
// Options.MaxStoredBody. It is 500, not 507: the limit is the server's
// configuration, not storage that ran out, and WebDAV's 507 reads as a
// transient condition to clients and proxies. Its writes were discarded,
// so the problem says that nothing was done.
func (m *Keys) tooLarge(r *http.Request, n int64) *porch.Response {
	m.errs.Error(r.Context(), "idem: the handler's response is larger than MaxStoredBody; nothing was stored",
		"method", r.Method, "path", r.URL.Path, "bytes", n, "max", m.opt.MaxStoredBody)
	return m.problem(problemResponseTooLarge, http.StatusInternalServerError, "Response too large to store",
		fmt.Sprintf("the response was %d bytes, more than the %d this endpoint stores, so nothing was done or stored; "+
			"the handler's answer was withheld", n, m.opt.MaxStoredBody))
}
