package shed

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
)

// problemOverloaded is the type of a refusal, stable for clients to
// switch on.
const problemOverloaded = "https://porch.dev/problems/overloaded"

// defaultRetryAfter is Options.RetryAfter's default.
const defaultRetryAfter = time.Second

// Options configures a Shedder. The zero value keeps no reserve, treats
// no request as critical and exempts none.
type Options struct {
	// Reserve is the fraction of the capacity kept for critical requests,
	// in [0, 1): ⌊capacity×Reserve⌋ slots (see the package doc). If zero,
	// none: every request is admitted while fewer than capacity are in
	// flight.
	Reserve float64
	// Critical reports whether a request that Handler meets is critical.
	// It runs on the request's goroutine before the request is counted,
	// so it must be cheap and must not block. If nil, none is, and
	// critical routes are those that mount Shedder.Critical.
	Critical func(*http.Request) bool
	// Exempt reports whether a request is never counted nor refused, by
	// Handler and Critical alike: a health probe, which must answer while
	// the instance is busiest. If nil, none is.
	Exempt func(*http.Request) bool
	// RetryAfter is what a refusal's Retry-After header says, rounded up
	// to whole seconds. If zero, 1 s: a shed request is cheap to retry,
	// and load changes within a second.
	RetryAfter time.Duration
	// Observer is told every admission, refusal and release. If nil,
	// nothing is.
	Observer Observer
}

// Shedder counts the requests in flight on one instance and refuses those
// past its thresholds (see the package doc). Mount it with
// [Shedder.Handler], and [Shedder.Critical] on critical routes.
//
// Create it with [New]; the zero value is not usable. It is safe for
// concurrent use.
type Shedder struct {
	capacity  int64 // requests in flight at once, critical or not
	threshold int64 // in flight at which a request not critical is refused
	critical  func(*http.Request) bool
	exempt    func(*http.Request) bool
	obs       Observer
	refusal   refusal

	inFlight atomic.Int64 // admitted and not yet released
}

// New returns a Shedder of capacity requests in flight at once, with
// opts. It panics on a capacity below 1, a Reserve outside [0, 1) (or
// NaN) and a negative RetryAfter.
func New(capacity int, opts Options) *Shedder {
	switch {
	case capacity < 1:
		panic("shed: New expects capacity >= 1, got " + strconv.Itoa(capacity))
	case !(opts.Reserve >= 0 && opts.Reserve < 1): // NaN too
		panic("shed: New expects Options.Reserve in [0, 1), got " + strconv.FormatFloat(opts.Reserve, 'g', -1, 64))
	case opts.RetryAfter < 0:
		panic("shed: New expects Options.RetryAfter >= 0, got " + opts.RetryAfter.String())
	}
	retry := opts.RetryAfter
	if retry == 0 {
		retry = defaultRetryAfter
	}
	return &Shedder{
		capacity:  int64(capacity),
		threshold: int64(capacity) - reserved(capacity, opts.Reserve),
		critical:  opts.Critical,
		exempt:    opts.Exempt,
		obs:       opts.Observer,
		refusal:   newRefusal(retry),
	}
}

// reserved is ⌊capacity×reserve⌋, a product within 1e-9 of a whole number,
// or within 1e-15 of it relatively, counting as that number (see the
// package doc), and at most capacity−1: a request that is not critical is
// always admitted by an idle instance.
//
// The relative bound is for large capacities: the error of a decimal
// reserve's binary rounding, and of the product, is a few parts in 1e16
// of the product, so at a capacity of 1e9 it passes 1e-9 (1e9×0.0157 is
// 15699999.999999998), while no reserve a person writes puts N×F that
// close to a whole number without it being one.
func reserved(capacity int, reserve float64) int64 {
	p := float64(capacity) * reserve
	n := math.Floor(p)
	if r := math.Round(p); math.Abs(p-r) < max(1e-9, p*1e-15) {
		n = r
	}
	// Below 1, N×F is below N; the snap must not make it N.
	return min(int64(n), int64(capacity)-1)
}

// InFlight returns the requests the Shedder has admitted and not yet
// released: a reading for a readiness report or a test, already stale
// when it returns.
func (s *Shedder) InFlight() int { return int(s.inFlight.Load()) }

// Handler is the shedder as middleware: it admits a request as critical
// when Options.Critical says so, else as not critical, and refuses it with
// 503 past its class's threshold. Mount it outermost.
func (s *Shedder) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, next, s.critical != nil && s.critical(r))
	})
}

// Critical is the shedder as middleware for critical routes: it admits
// every request as critical, refusing it only once capacity requests are
// in flight. A request that a mount of Handler further out has admitted
// passes on as it was admitted.
func (s *Shedder) Critical(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, next, true)
	})
}

// serve admits r in its class and runs next, or refuses it.
func (s *Shedder) serve(w http.ResponseWriter, r *http.Request, next http.Handler, critical bool) {
	if (s.exempt != nil && s.exempt(r)) || admittedBy(r.Context()) == s {
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	if !s.admit(critical) {
		s.observe(ctx, Refused, critical)
		s.refusal.write(w, critical)
		return
	}
	defer s.release(ctx, critical) // also when next panics
	s.observe(ctx, Admitted, critical)
	a := &admittedRequest{ctx: admitted{Context: ctx, s: s}}
	a.r = *r.WithContext(&a.ctx)
	next.ServeHTTP(w, &a.r)
}

// admittedRequest is the request a Shedder hands on with its marked
// context, in one allocation instead of two (TestAdmissionAllocations):
// r.WithContext is inlined, so its own copy of the request stays on the
// stack and is copied into r here.
type admittedRequest struct {
	r   http.Request
	ctx admitted
}

// admit takes a slot if one is open to the class: below the threshold for
// a request that is not critical, below the capacity for a critical one.
// The compare-and-swap makes the check and the count one step, so no two
// requests can both take the last open slot.
func (s *Shedder) admit(critical bool) bool {
	limit := s.threshold
	if critical {
		limit = s.capacity
	}
	for {
		n := s.inFlight.Load()
		if n >= limit {
			return false
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back the slot of a request that admit admitted.
func (s *Shedder) release(ctx context.Context, critical bool) {
	s.inFlight.Add(-1)
	s.observe(ctx, Released, critical)
}

func (s *Shedder) observe(ctx context.Context, e Event, critical bool) {
	if s.obs != nil {
		s.obs.ShedEvent(ctx, e, critical)
	}
}

// admitted is the context a Shedder hands on with a request it admitted,
// so that a mount of the same Shedder further in passes the request on
// rather than counting it twice. It wraps its parent itself, rather than
// going into a context.WithValue, so that it can share the request's
// allocation (admittedRequest); every copy of the request (r.WithContext,
// r.Clone) keeps it.
type admitted struct {
	context.Context
	s *Shedder
}

type admittedKey struct{}

// Value answers admittedKey with the Shedder, and anything else as the
// parent does.
func (a *admitted) Value(key any) any {
	if _, ok := key.(admittedKey); ok {
		return a.s
	}
	return a.Context.Value(key)
}

// admittedBy returns the Shedder that admitted the request of ctx, or nil.
func admittedBy(ctx context.Context) *Shedder {
	s, _ := ctx.Value(admittedKey{}).(*Shedder)
	return s
}

// refusal is the two 503 answers, built once: a refusal is what an
// overloaded instance sends most, and must cost next to nothing.
type refusal struct {
	retryAfter string    // the Retry-After header's value
	bodies     [2][]byte // by class: not critical, critical
	length     [2]string // each body's Content-Length
}

func newRefusal(retry time.Duration) refusal {
	rf := refusal{retryAfter: strconv.Itoa(problemtype.RetryAfter(retry))}
	for i, detail := range []string{
		"the server is busy: requests of this kind are refused until load falls; retry after the Retry-After delay",
		"the server is at capacity; retry after the Retry-After delay",
	} {
		body, err := json.Marshal(porch.Problem{Type: problemOverloaded, Title: "Service Unavailable",
			Status: http.StatusServiceUnavailable, Detail: detail})
		if err != nil { // a struct of strings and an int always marshals
			panic("shed: marshal problem: " + err.Error())
		}
		rf.bodies[i] = append(body, '\n')
		rf.length[i] = strconv.Itoa(len(rf.bodies[i]))
	}
	return rf
}

// write sends the refusal of a request of the class.
func (rf *refusal) write(w http.ResponseWriter, critical bool) {
	i := 0
	if critical {
		i = 1
	}
	h := w.Header()
	// Set, not a shared slice: a middleware further out may change a
	// header's value in place.
	h.Set("Content-Type", porch.ProblemContentType)
	h.Set("Retry-After", rf.retryAfter)
	h.Set("Content-Length", rf.length[i])
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(rf.bodies[i]) //nolint:errcheck // the client went away; nothing to do
}
