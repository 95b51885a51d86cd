package rate

import (
	"net/http"
	"strconv"
	"time"
)

// setHeaders writes the X-RateLimit-* triple and the IETF draft-10
// RateLimit and RateLimit-Policy fields, and Retry-After on a refusal.
// X-RateLimit-Reset is a Unix timestamp on the wall clock, because a client
// has no access to this process's timeline.
func (l *Limiter) setHeaders(h http.Header, v Verdict) {
	refused := !v.Allowed && !v.DryRun
	until := v.ResetAt
	if refused {
		// A refusal's t is when the client may come back, which an
		// algorithm may know before its whole allowance is back (GCRA:
		// one emission interval).
		until = v.RetryAt
	}
	left := max(until.Sub(l.store.Wall()), 0)
	// Rounded up by a remainder, not by adding a second less a nanosecond
	// first, which could wrap a span near Duration's range negative.
	secs := int64(left / time.Second)
	if left%time.Second != 0 {
		secs++
	}
	if refused {
		// A refused client must wait at least a second, and RateLimit's t
		// must say what Retry-After says: both from this one reading.
		secs = max(secs, 1)
	}
	resetUnix := v.ResetAt.Unix()
	if v.ResetAt.Nanosecond() > 0 {
		resetUnix++ // round up: the window is not over before this second
	}
	// The three values that change per response are formatted into one
	// string and handed out as slices of it, from one backing array: two
	// allocations per response instead of seven. Each slice is capped at
	// its length (vals[i:i+1:i+1]) so that a later Header.Add on one key
	// copies instead of writing over the next key's value.
	var buf [96]byte
	b := strconv.AppendInt(buf[:0], v.Remaining, 10)
	endRemaining := len(b)
	b = strconv.AppendInt(b, resetUnix, 10)
	endReset := len(b)
	b = append(b, l.rateLimitPrefix...)
	b = append(b, b[:endRemaining]...)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, secs, 10)
	s := string(b)
	vals := []string{s[:endRemaining], s[endRemaining:endReset], s[endReset:]}
	// Canonical keys assigned directly: Header.Set would canonicalize and
	// allocate on every response. The fixed values share one slice per
	// limiter, which net/http only reads.
	h[hdrLimit] = l.limitValue
	h[hdrPolicy] = l.policyValue
	h[hdrRemaining] = vals[0:1:1]
	h[hdrReset] = vals[1:2:2]
	h[hdrRateLimit] = vals[2:3:3]
	if v.DryRun {
		h[hdrDryRun] = dryRunValue(v)
	}
	if refused {
		h[hdrRetryAfter] = []string{strconv.FormatInt(secs, 10)}
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
	hdrLimit      = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining  = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset      = http.CanonicalHeaderKey("X-RateLimit-Reset")
	hdrPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hdrDryRun     = http.CanonicalHeaderKey("X-RateLimit-Dry-Run")
	hdrRetryAfter = http.CanonicalHeaderKey("Retry-After")
)
