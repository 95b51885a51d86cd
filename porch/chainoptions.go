package porch

import (
	"fmt"
	"log/slog"
	"net/http"
)

// ChainOptions configure a chain. The zero value is what [Chain] uses; it is
// safe to build chains from one ChainOptions concurrently.
type ChainOptions struct {
	// PanicResponse, if set, renders the 500 that replaces the response
	// when the handler or a hook panics, in place of the problem+json
	// "about:blank" Internal Server Error: an HTML error page, an API's own
	// error shape, a request ID to quote to support. The status stays 500
	// whatever it sets, because the client and the after hooks must learn
	// that the handler did not complete (idempotency stores no 5xx). It
	// runs once per panic; it is not given the panic value, which is logged
	// and must not reach a client. If it returns nil or panics itself, the
	// default. If nil, the default.
	PanicResponse func(r *http.Request) *Response
}

// Chain is [Chain] with the options o: middleware that runs ms as one
// before/after chain around a buffered handler.
func (o ChainOptions) Chain(ms ...Middleware) func(http.Handler) http.Handler {
	ms = append([]Middleware(nil), ms...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.serve(ms, next, w, r)
		})
	}
}

// panicResponse calls PanicResponse, if set, and forces its status to 500.
// It runs inside a deferred recover, where a second panic would escape the
// chain and skip the after hooks, so a panic in it is caught and logged.
func (o ChainOptions) panicResponse(r *http.Request) (res *Response) {
	if o.PanicResponse == nil {
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			slog.ErrorContext(r.Context(), "porch: PanicResponse panicked", "panic", fmt.Sprint(v))
			res = nil
		}
	}()
	res = o.PanicResponse(r)
	if res == nil {
		return nil
	}
	return &Response{Status: http.StatusInternalServerError, Header: res.Header.Clone(), Body: res.Body}
}
