package main

import (
	"net/http"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// inflightLimiter is the -inflight-limit limiter, or nil without one: its
// methods then mount nothing.
type inflightLimiter struct{ *inflight.Limiter }

// newInflight makes the -inflight-limit limiter on the slots of the
// limiter's store, keyed as the rate limiter keys (-trust-proxy), or nil
// for -inflight-limit 0. m, if not nil, observes it.
func newInflight(cfg config, pool *porch.Pool, st driver.Slots, m *prom.Metrics) *inflightLimiter {
	if cfg.inflightLimit == 0 {
		return nil
	}
	opt := inflight.Options{TrustProxy: cfg.trustProxy}
	if m != nil { // a nil *prom.Metrics in an interface would not be nil
		opt.Observer = m
	}
	return &inflightLimiter{inflight.New(pool, st, cfg.inflightLimit, opt)}
}

// handler is the limiter as chi middleware, or next itself without one.
func (l *inflightLimiter) handler(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return l.Handler(next)
}

// after lists first, then the limiter (if any), then the rest, for a
// porch.Chain: in flight after the rate limiter, before idempotency.
func (l *inflightLimiter) after(first porch.Middleware, rest ...porch.Middleware) []porch.Middleware {
	ms := []porch.Middleware{first}
	if l != nil {
		ms = append(ms, l.Limiter)
	}
	return append(ms, rest...)
}

// spanHeader carries, with -report-handler-span, when the handler began
// and when it wrote its status, in Unix nanoseconds ("start-end"): a
// span inside the request's in-flight slot, which the acceptance gate's
// chaos legs overlay per client to check that no more than
// -inflight-limit ran at once.
const spanHeader = "X-Handler-Span"

// reportSpan wraps h to set spanHeader when -report-handler-span is on.
func (s *shop) reportSpan(h http.HandlerFunc) http.HandlerFunc {
	if !s.cfg.reportSpan {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h(&spanWriter{ResponseWriter: w, start: time.Now().UnixNano()}, r)
	}
}

// spanWriter stamps spanHeader when the status is written.
type spanWriter struct {
	http.ResponseWriter
	start int64
	wrote bool
}

func (w *spanWriter) WriteHeader(status int) {
	if !w.wrote {
		w.wrote = true
		w.Header().Set(spanHeader, strconv.FormatInt(w.start, 10)+"-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *spanWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}
