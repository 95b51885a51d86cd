package porch

import (
	"net/http"
	"time"
)

// writeTimeoutKey carries App.WriteTimeout to Chain in a request's context.
type writeTimeoutKey struct{}

// extendWriteDeadline gives a response that Chain buffered the whole
// WriteTimeout from now, when it is about to be written: the server's
// deadline started when the request was read, and a handler that worked for
// most of it would otherwise have its finished response cut off mid-write.
func extendWriteDeadline(w http.ResponseWriter, r *http.Request) {
	d, ok := r.Context().Value(writeTimeoutKey{}).(time.Duration)
	if !ok {
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d)) //nolint:errcheck // a writer without deadlines keeps the server's
}
