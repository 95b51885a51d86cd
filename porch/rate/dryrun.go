package rate

import (
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// dryRunLogEvery is how often a dry-run limiter logs a would-be refusal: the
// first at once, then at most one line per interval carrying how many were
// held back, so that a client far over a new limit cannot flood the log.
const dryRunLogEvery = errlog.DefaultEvery

// dryRun turns count's outcome into DryRun's: a refusal is served with
// Verdict.DryRun set, and a failure (other than porch.ErrSkip) is logged and
// served uncounted.
func (l *Limiter) dryRun(r *http.Request, key string, n int64, v Verdict, err error) (Verdict, error) {
	if err != nil {
		if !errors.Is(err, porch.ErrSkip) {
			l.errs.Error(r.Context(), "rate: dry run: could not count a request; serving it", "limiter", l.opt.Name, "err", err)
		}
		return Verdict{}, porch.ErrSkip
	}
	v.DryRun = true
	if !v.Allowed {
		if suppressed, ok := l.dryLog.admit(l.store.Wall(), dryRunLogEvery); ok {
			args := []any{"limiter", l.opt.Name, "key", key, "weight", n, "limit", v.Limit}
			if suppressed > 0 {
				args = append(args, "suppressed", suppressed)
			}
			logctx.Logger(r.Context(), l.opt.Logger).InfoContext(r.Context(), "rate: dry run: would have refused a request", args...)
		}
	}
	return v, nil
}
