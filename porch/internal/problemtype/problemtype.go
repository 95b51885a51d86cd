// Package problemtype moves the problem types of porch's middlewares under
// the base URI an application chose (rate.Options.ProblemBase,
// idem.Options.ProblemBase), so that both read the option the same way.
package problemtype

import (
	"net/url"
	"strings"
	"time"
)

// Default is the base every porch problem type is defined under.
const Default = "https://porch.dev/problems/"

// Under returns typ, a type under Default, under base instead: the part
// after Default is appended to base as it is. An empty base leaves typ as
// it is.
func Under(base, typ string) string {
	if base == "" {
		return typ
	}
	return base + strings.TrimPrefix(typ, Default)
}

// Valid reports whether base can begin a URI reference, which a problem's
// type is (RFC 9457): the constructors refuse one that cannot.
func Valid(base string) bool {
	_, err := url.Parse(base)
	return err == nil
}

// RetryAfter rounds d up to whole seconds, at least 1, as the Retry-After
// header wants.
func RetryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}
