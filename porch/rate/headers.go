package rate

import (
	"net/http"
	"strconv"
	"time"
)

// setHeaders writes the X-RateLimit-* triple and the IETF draft-10 RateLimit
// and RateLimit-Policy fields. X-RateLimit-Reset is a Unix timestamp on the
// wall clock, because a client has no access to this process's timeline.
func (l *Limiter) setHeaders(h http.Header, v Verdict) {
	left := max(v.ResetAt.Sub(l.store.Wall()), 0)
	secs := int64((left + time.Second - 1) / time.Second)
	resetUnix := v.ResetAt.Unix()
	if v.ResetAt.Nanosecond() > 0 {
		resetUnix++ // round up: the window is not over before this second
	}
	remaining := strconv.FormatInt(v.Remaining, 10)
	// Canonical keys assigned directly: Header.Set would canonicalize and
	// allocate on every response. The fixed values share one slice per
	// limiter, which net/http only reads.
	h[hdrLimit] = l.limitValue
	h[hdrPolicy] = l.policyValue
	h[hdrRemaining] = []string{remaining}
	h[hdrReset] = []string{strconv.FormatInt(resetUnix, 10)}
	h[hdrRateLimit] = []string{l.rateLimitPrefix + remaining + ";t=" + strconv.FormatInt(secs, 10)}
	if v.DryRun {
		h[hdrDryRun] = dryRunValue(v)
	}
}

// dryRunValue is X-RateLimit-Dry-Run's value: what enforcing would have
// answered.
func dryRunValue(v Verdict) []string {
	if v.Allowed {
		return dryRunAllowed
	}
	return dryRunLimited
}

var (
	dryRunAllowed = []string{"allowed"}
	dryRunLimited = []string{"limited"}
)

// Canonical header keys, as http.CanonicalHeaderKey spells them.
var (
	hdrLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
	hdrPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit = http.CanonicalHeaderKey("RateLimit")
	hdrDryRun    = http.CanonicalHeaderKey("X-RateLimit-Dry-Run")
)
