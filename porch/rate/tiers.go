package rate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/errlog"
)

// Tier is one policy a [Tiered] picks per request: a *Limiter, or a *Set of
// several limits.
type Tier interface {
	porch.Middleware
	Handler(next http.Handler) http.Handler
}

// ErrUnknownTier is the failure of a request whose pick named no tier
// of the Tiered: a 500, like a failing KeyFunc.
var ErrUnknownTier = errors.New("rate: the request's tier is not one of the limiter's tiers")

// Tiered counts each request against the tier its pick picks: a free
// and a paid plan on one route, each a limiter of its own Name with its own
// policy, counters and headers (RateLimit-Policy announces the picked
// tier's policy only). Build it with [Tiers].
//
// It replaces a per-request limit (httprate's WithRequestLimit, Fiber's
// MaxFunc), which porch does not have: a limit is a policy that New records
// and checks across instances, and a tier is one of those.
//
// A request whose tier cannot be told is not served uncounted: a pick
// error, or a tier the Tiered does not have, answers 500
// (application/problem+json of type rate-key-failed) and is logged, as a
// failing KeyFunc is. porch.ErrSkip from the pick exempts the request:
// served uncounted, without headers.
//
// A Tiered is safe for concurrent use and does not own its tiers: Close
// each limiter. The zero value is not usable.
type Tiered struct {
	pick  porch.KeyFunc
	tiers map[string]Tier
}

// Tiers returns the middleware that counts each request against
// tiers[pick(r)] (see Tiered). pick names the tier from what the request
// carries, as a key function does: the plan of the principal your
// authentication resolved ("free", "paid"); porch.ErrSkip exempts the
// request, and any other error fails it closed. Like a KeyFunc it runs at
// each mount of the Tiered a request meets, so it must be cheap and give
// the same answer each time (see Options.KeyFunc). It panics, with a
// "rate: " message, given a nil pick, no tier, or a nil one.
func Tiers(pick porch.KeyFunc, tiers map[string]Tier) *Tiered {
	if pick == nil {
		panic("rate: Tiers expects a non-nil pick")
	}
	if len(tiers) == 0 {
		panic("rate: Tiers expects at least one tier")
	}
	own := make(map[string]Tier, len(tiers))
	for name, tier := range tiers {
		if tier == nil || isNilTier(tier) {
			panic(fmt.Sprintf("rate: Tiers expects non-nil tiers, got nil for %q", name))
		}
		own[name] = tier
	}
	return &Tiered{pick: pick, tiers: own}
}

// isNilTier reports whether tier is a nil *Limiter or *Set in an interface.
func isNilTier(tier Tier) bool {
	if tier == nil {
		return true
	}
	v := reflect.ValueOf(tier)
	return v.Kind() == reflect.Pointer && v.IsNil() // *Limiter, *Set, *Tiered, or a tier of the caller's
}

type tierKey struct{ t *Tiered }

// tierOf picks r's tier name, or why it cannot.
func (t *Tiered) tierOf(r *http.Request) (string, error) {
	name, err := t.pick(r)
	switch {
	case errors.Is(err, porch.ErrSkip):
		return "", porch.ErrSkip
	case err != nil:
		return "", fmt.Errorf("rate: tier function: %w", err)
	}
	if _, ok := t.tiers[name]; !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownTier, name)
	}
	return name, nil
}

// Before counts the request against its tier, as that tier's Before does.
// It implements porch.Middleware.
func (t *Tiered) Before(r *http.Request) (*http.Request, *porch.Response) {
	name, err := t.tierOf(r)
	if errors.Is(err, porch.ErrSkip) {
		return t.passOn(r), nil
	}
	if err != nil {
		return t.passOn(r), tierFailure(r, err)
	}
	tier := t.tiers[name]
	r, res := tier.Before(r)
	return r.WithContext(context.WithValue(r.Context(), tierKey{t}, tier)), res
}

// passOn hands on a request t picks no tier for here, so that After finds
// no tier: a chain of t further out that counted the request settles and
// reports it itself, as with a Set (see Set.passOn).
func (t *Tiered) passOn(r *http.Request) *http.Request {
	if r.Context().Value(tierKey{t}) == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), tierKey{t}, nil))
}

// After runs the After of the tier Before picked. It implements
// porch.Middleware.
func (t *Tiered) After(r *http.Request, res *porch.Response, c porch.Completion) {
	if tier, ok := r.Context().Value(tierKey{t}).(Tier); ok {
		tier.After(r, res, c)
	}
}

// Handler is the Tiered as plain chi middleware: each request goes through
// its tier's Handler.
func (t *Tiered) Handler(next http.Handler) http.Handler {
	hs := make(map[string]http.Handler, len(t.tiers))
	for name, tier := range t.tiers {
		hs[name] = tier.Handler(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := t.tierOf(r)
		switch {
		case errors.Is(err, porch.ErrSkip):
			next.ServeHTTP(w, r)
		case err != nil:
			tierFailure(r, err).Write(w)
		default:
			hs[name].ServeHTTP(w, r)
		}
	})
}

// tierFailure is the 500 for a request whose tier cannot be told. The
// error is logged, not sent: it is the server's.
func tierFailure(r *http.Request, err error) *porch.Response {
	errlog.Error(r.Context(), "rate: could not pick a request's tier", "err", err)
	return porch.Problem{
		Type:   problemKeyFailed,
		Title:  "Internal Server Error",
		Status: http.StatusInternalServerError,
		Detail: "the rate limiter could not tell which tier this request belongs to",
	}.Response()
}
