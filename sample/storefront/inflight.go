package main

import (
	"net/http"

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
