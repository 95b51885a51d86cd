package idem

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/writeonce/writeonce/porch"
	"github.com/writeonce/writeonce/porch/store"
)

// Problem types this package answers with; clients may switch on them.
const (
	ProblemKeyRequired    = "https://porch.dev/problems/idempotency-key-required"
	ProblemKeyInvalid     = "https://porch.dev/problems/idempotency-key-invalid"
	ProblemKeyReused      = "https://porch.dev/problems/idempotency-key-reused"
	ProblemInFlight       = "https://porch.dev/problems/idempotency-in-flight"
	ProblemBodyTooLarge   = "https://porch.dev/problems/idempotency-body-too-large"
	ProblemBodyUnreadable = "https://porch.dev/problems/idempotency-body-unreadable"
	ProblemUnavailable    = "https://porch.dev/problems/idempotency-unavailable"
)

func problem(typ string, status int, title, detail string) *porch.Response {
	return porch.Problem{Type: typ, Title: title, Status: status, Detail: detail}.Response()
}

// unavailable is the fail-closed answer: the handler does not run, or its
// response is withheld because it could not be made durable.
func (m *Idempotent) unavailable(r *http.Request, err error) *porch.Response {
	detail := "idempotency state could not be read or written"
	switch {
	case errors.Is(err, porch.ErrSaturated):
		detail = "the idempotency pool is saturated"
	case errors.Is(err, store.ErrNoKeyConn):
		detail = "no database connection is free to hold this key"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		detail = "the request ended before it was decided"
	default:
		slog.ErrorContext(r.Context(), "idem: store failed", "err", err)
	}
	return porch.Unavailable(ProblemUnavailable, detail, time.Second)
}
