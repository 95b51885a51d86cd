package porch

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"

	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// Middleware is a before/after hook pair run by [Chain] around a buffered
// handler.
//
// Before runs first, in the order the middlewares were given. It returns the
// request to pass on (it may add to its context) and, to short-circuit, a
// non-nil response: then no later Before and no handler runs.
//
// After runs for every middleware whose Before ran, in reverse order, even
// when a later Before short-circuited or the handler panicked. It may change
// res in place. c tells how res came to be: a middleware that records the
// handler's outcome (idempotency) must not record another middleware's
// refusal as if the handler had answered it.
type Middleware interface {
	Before(r *http.Request) (*http.Request, *Response)
	After(r *http.Request, res *Response, c Completion)
}

// Completion tells an after hook how the response came to be.
type Completion int

const (
	// Handled: the handler ran and returned.
	Handled Completion = iota
	// ShortCircuited: a before hook answered; the handler did not run.
	ShortCircuited
	// Panicked: the handler panicked; the response is the 500 that
	// replaced its output.
	Panicked
)

// String names c.
func (c Completion) String() string {
	switch c {
	case Handled:
		return "handled"
	case ShortCircuited:
		return "short-circuited"
	case Panicked:
		return "panicked"
	}
	return "Completion(" + strconv.Itoa(int(c)) + ")"
}

// Chain returns chi-compatible middleware that runs ms as one before/after
// chain around next. The handler's output is buffered so after hooks can see
// and change the whole response before any byte reaches the client; that is
// what lets a store-backed middleware make a response durable before it is
// visible. Streaming handlers should not sit behind a porch chain.
//
// A panic in the handler or a hook is logged and answered with a
// problem+json 500, and every after hook whose before ran still runs.
//
// Mount one porch middleware with its Handler method (r.Use(lim.Handler));
// use Chain for several that must see one buffered response, such as a
// limiter in front of idempotency keys.
func Chain(ms ...Middleware) func(http.Handler) http.Handler {
	ms = append([]Middleware(nil), ms...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(ms, next, w, r)
		})
	}
}

func serve(ms []Middleware, next http.Handler, w http.ResponseWriter, r *http.Request) {
	var stack [4]*http.Request // the common chain fits without a heap allocation
	reqs := stack[:0]
	in := r // runBefores returns no request when a hook panicked
	res, c, r := runBefores(ms, r, &reqs)
	if res == nil {
		res, c = runHandler(next, r)
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		res, c = runAfter(ms[i], reqs[i], res, c)
	}
	extendWriteDeadline(w, in)
	res.Write(w)
}

// runBefores runs the before hooks, appending to reqs the request each one
// returned, until one short-circuits, and returns the request for the
// handler. A hook that panics (or a callback it
// runs: a key or principal function) becomes a 500 like a handler's panic,
// so that the after hooks of those before it still run: a middleware that
// took a resource in Before (an idempotency key) must get to give it back.
func runBefores(ms []Middleware, r *http.Request, reqs *[]*http.Request) (res *Response, c Completion, out *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			res, c = recovered(r, v), Panicked
		}
	}()
	for _, m := range ms {
		next, short := m.Before(r)
		r = next
		*reqs = append(*reqs, r)
		if short != nil {
			return short, ShortCircuited, r
		}
	}
	return nil, Handled, r
}

// runHandler runs h into a buffer. Any panic, http.ErrAbortHandler included,
// becomes a 500 so that the after hooks learn the handler did not complete
// (idempotency must not store such a response); only ErrAbortHandler, which
// handlers raise on purpose, goes unlogged.
func runHandler(h http.Handler, r *http.Request) (res *Response, c Completion) {
	bw := newBufferWriter()
	defer func() {
		if v := recover(); v != nil {
			res, c = recovered(r, v), Panicked
		}
	}()
	h.ServeHTTP(bw, r)
	return bw.res, Handled
}

// runAfter runs one after hook. A hook that panics becomes a 500 like a
// handler's panic, and the hooks before it in the chain still run, told
// the request Panicked: a middleware that took a resource in Before (an
// idempotency key) must get to give it back, and must not store an answer
// a later hook failed to finish.
func runAfter(m Middleware, r *http.Request, res *Response, c Completion) (out *Response, oc Completion) {
	defer func() {
		if v := recover(); v != nil {
			out, oc = recovered(r, v), Panicked
		}
	}()
	m.After(r, res, c)
	return res, c
}

// recovered logs a recovered panic (but http.ErrAbortHandler, which is
// raised on purpose) and returns the 500 that replaces the response.
func recovered(r *http.Request, v any) *Response {
	if v != http.ErrAbortHandler {
		logctx.Logger(r.Context(), nil).ErrorContext(r.Context(), "porch: panic",
			"method", r.Method, "path", r.URL.Path,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
	return Problem{
		Type:   "about:blank",
		Title:  "Internal Server Error",
		Status: http.StatusInternalServerError,
	}.Response()
}
