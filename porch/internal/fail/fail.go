// Package fail is the answer of a porch middleware that could not do its
// work for a request: 503 with Retry-After, never a pass, and the store's
// failure logged without flooding.
package fail

import (
	"context"
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/errlog"
)

// Detail is the problem detail of a store-backed middleware that could not
// do its work for r, which then answers 503 with Retry-After, never a pass
// (porch.Unavailable: this package sits below porch and builds no
// response). what names the work ("count this request"). A saturated pool
// and a request that ended are expected under load and go unlogged; any
// other error means the store failed, and is logged through log (the
// process's if nil), so a store that fails every request does not flood
// the log.
func Detail(log *errlog.Log, r *http.Request, what string, err error) string {
	switch {
	case errors.Is(err, actor.ErrSaturated):
		return "the actor pool is saturated; could not " + what
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "the request ended before porch could " + what
	default:
		log.Error(r.Context(), "porch: could not "+what, "err", err)
		return "the store failed; could not " + what
	}
}
