package idem

import (
	"fmt"

	"github.com/writeonce/porch-go/porch/internal/canonjson"
)

// The problem types, under the names the black-box tests match on.
const (
	ProblemKeyRequired      = problemKeyRequired
	ProblemKeyInvalid       = problemKeyInvalid
	ProblemKeyReused        = problemKeyReused
	ProblemInFlight         = problemInFlight
	ProblemBodyTooLarge     = problemBodyTooLarge
	ProblemBodyUnreadable   = problemBodyUnreadable
	ProblemBodyTimeout      = problemBodyTimeout
	ProblemUnavailable      = problemUnavailable
	ProblemWriteFailed      = problemWriteFailed
	ProblemBodyInvalid      = problemBodyInvalid
	ProblemResponseTooLarge = problemResponseTooLarge
	ProblemPrincipalFailed  = problemPrincipalFailed
)

// The defaults and limits the tests check, under the names they use; users
// read them on the Options fields they default.
const (
	Header         = defaultKeyHeader
	ReplayedHeader = defaultReplayedHeader
	MaxKeyLen      = maxKeyLen
	DefaultMaxBody = defaultMaxBody
)

// CanonicalJSON is FingerprintJSON's canonical form, refusing a body that
// has none: the tests check the form, and use it as a Fingerprint that
// refuses.
func CanonicalJSON(body []byte) ([]byte, error) {
	c, err := canonjson.Form(body)
	if err != nil {
		return nil, fmt.Errorf("idem: %w", err)
	}
	return c, nil
}
