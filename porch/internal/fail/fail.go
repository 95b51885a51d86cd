// Package fail is the answer of a porch middleware that could not do its
// work for a request: 503 with Retry-After, never a pass, and the store's
// failure logged without flooding.
package fail

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
)

// Closed is the answer of a store-backed middleware that could not do its
// work for r: 503 with Retry-After, never a pass. typ is the middleware's
// problem type and what names its work for the detail ("count this
// request"). A saturated pool and a request that ended are expected under
// load and go unlogged; any other error means the store failed, and is
// logged through log (the process's if nil), so a store that fails every
// request does not flood the log.
func Closed(log *errlog.Log, r *http.Request, typ, what string, err error) *porch.Response {
	var detail string
	switch {
	case errors.Is(err, porch.ErrSaturated):
		detail = "the actor pool is saturated; could not " + what
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		detail = "the request ended before porch could " + what
	default:
		detail = "the store failed; could not " + what
		log.Error(r.Context(), "porch: could not "+what, "err", err)
	}
	return porch.Unavailable(typ, detail, time.Second)
}
