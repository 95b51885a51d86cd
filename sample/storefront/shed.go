package main

import (
	"fmt"
	"net/http"

	"github.com/writeonce/porch-go/porch/shed"
)

// shedConfig is -max-inflight and -critical-reserve: the requests the
// instance serves at once, and the fraction of them kept for its
// critical routes (see porch/shed).
type shedConfig struct {
	maxInflight int     // 0: no shedding
	reserve     float64 // shed.Options.Reserve
}

// check refuses a negative -max-inflight, and a -critical-reserve outside
// [0, 1) or given without -max-inflight (even 0: a reserve of no capacity
// is a mistake in the command line, not a default).
func (c shedConfig) check(reserveSet bool) error {
	switch {
	case c.maxInflight < 0:
		return fmt.Errorf("-max-inflight must not be negative, got %d", c.maxInflight)
	case !(c.reserve >= 0 && c.reserve < 1): // NaN too
		return fmt.Errorf("-critical-reserve must be at least 0 and below 1, got %g", c.reserve)
	case reserveSet && c.maxInflight == 0:
		return fmt.Errorf("-critical-reserve needs -max-inflight: the reserve is a fraction of the requests the instance serves at once")
	}
	return nil
}

// newShedder is the shop's load shedder, or nil with -max-inflight 0. The
// shop mounts it first on every route but /healthz, before the rate
// limiters and idempotency keys: a request shed for load costs no store
// work, and /healthz answers however busy the instance is.
func newShedder(c shedConfig, obs shed.Observer) *shed.Shedder {
	if c.maxInflight == 0 {
		return nil
	}
	return shed.New(c.maxInflight, shed.Options{Reserve: c.reserve, Critical: criticalRoute, Observer: obs})
}

// criticalRoute reports whether r is for one of the shop's critical
// routes, which the reserve is kept for: POST /checkout, which takes the
// money, and POST /login, which lets customers in.
func criticalRoute(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/checkout" || r.URL.Path == "/login")
}
