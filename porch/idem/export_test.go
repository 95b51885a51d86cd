package idem

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
