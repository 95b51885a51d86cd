package rate

import (
	"context"
	"errors"
	"fmt"
)

// ErrWeight is returned by AllowN for a weight below 1, and makes the
// middleware answer 500 when Options.Weight returns one: a request that
// costs nothing is one to exempt (see ErrSkip), not to count as zero.
var ErrWeight = errors.New("rate: a request's weight must be at least 1")

// ErrOverLimit is returned, wrapped, by AllowN for a weight above the
// limit, which no window could ever allow. Nothing is counted. The
// middleware answers 413 (ProblemOverLimit) without Retry-After rather than
// 429: a client retries a 429, and this request would be refused forever.
var ErrOverLimit = errors.New("rate: request weight exceeds the limit")

// AllowN counts one request of weight n by principal, as Allow counts a
// request of weight 1: it is allowed only if its window's count plus n is
// within the limit, and then the count grows by n, durably, before AllowN
// returns. A refused request changes nothing.
//
// It fails, without counting, with ErrNoPrincipal for "", ErrWeight for
// n < 1 and ErrOverLimit for n above the limit; and otherwise as Allow
// does. In every failure the Verdict is zero and the caller must not serve
// the request.
func (l *Limiter) AllowN(ctx context.Context, principal string, n int) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	if err := l.checkWeight(n); err != nil {
		return Verdict{}, err
	}
	return l.allow(ctx, l.principalKey(principal), int64(n))
}

// checkWeight reports why a request of weight n cannot be counted, if it
// cannot.
func (l *Limiter) checkWeight(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("%w, got %d", ErrWeight, n)
	case int64(n) > l.limit:
		return fmt.Errorf("%w: weight %d, limit %d per %s", ErrOverLimit, n, l.limit, l.window)
	}
	return nil
}
