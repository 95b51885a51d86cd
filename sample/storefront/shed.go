package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/writeonce/porch-go/porch/shed"
)

// shedConfig is -max-inflight and -critical-reserve: the requests the
// instance serves at once, and the fraction of them kept for its
// critical routes (see porch/shed).
type shedConfig struct {
	maxInflight int     // 0: no shedding
	reserve     float64 // shed.Options.Reserve
}

// check parses -critical-reserve from its text into c, and refuses a
// negative -max-inflight, and a -critical-reserve outside [0, 1) or given
// without -max-inflight (even 0: a reserve of no capacity is a mistake in
// the command line, not a default).
//
// The reserve is read as text, not with flag.Float64Var: the flag package
// answers a value past float64's range (1e400) or not a number with its
// error and the whole usage, and an out-of-range reserve is one line.
func (c shedConfig) check(reserve string, reserveSet bool) (shedConfig, error) {
	if c.maxInflight < 0 {
		return c, fmt.Errorf("-max-inflight must not be negative, got %d", c.maxInflight)
	}
	f, err := strconv.ParseFloat(reserve, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange): // ±Inf past the range: refused below
		return c, fmt.Errorf("-critical-reserve must be a number at least 0 and below 1, got %q", reserve)
	case !(f >= 0 && f < 1): // NaN too
		// As written, and as read when they differ: 0.99999999999999999
		// is 1 once it is a float64.
		got := reserve
		if g := strconv.FormatFloat(f, 'g', -1, 64); g != reserve {
			got += " (" + g + ")"
		}
		return c, fmt.Errorf("-critical-reserve must be at least 0 and below 1, got %s", got)
	case reserveSet && c.maxInflight == 0:
		return c, fmt.Errorf("-critical-reserve needs -max-inflight: the reserve is a fraction of the requests the instance serves at once")
	}
	c.reserve = f
	return c, nil
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
