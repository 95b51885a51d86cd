package rate

import (
	"context"
	"net/http"

	"github.com/writeonce/porch-go/porch/rate/internal/count"
)

// CounterKey exposes, to the black-box tests only, the counter key r is
// counted against, so that they can compare keys and read rows.
func (l *Limiter) CounterKey(r *http.Request) string {
	k, err := l.key(r)
	if err != nil {
		panic(err)
	}
	return k
}

// AllowKey counts one request against a counter key, as Before does.
func (l *Limiter) AllowKey(ctx context.Context, key string) (Verdict, error) {
	return l.allow(ctx, key, 1)
}

// The problem types, under the names the black-box tests match on.
const (
	ProblemLimited     = problemLimited
	ProblemUnavailable = problemUnavailable
	ProblemKeyFailed   = problemKeyFailed
	ProblemOverLimit   = problemOverLimit
)

// LeaseIdle is how long a key idles before its lease is given back.
const LeaseIdle = count.LeaseIdle
