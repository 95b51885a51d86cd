package rate

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
)

// Failures counts only the requests answered 400 or above: with
// Options.CountStatus it limits failed attempts (failed logins, wrong
// one-time codes) and leaves successful ones free, as Fiber's
// SkipSuccessfulRequests does.
func Failures(status int) bool { return status >= 400 }

// Successes counts only the requests answered below 400, as Fiber's
// SkipFailedRequests does: a client is not charged for requests it got
// nothing from.
func Successes(status int) bool { return status < 400 }

// UnlessServerError counts every request but those answered 500 or above:
// a client is not charged for the server's failures.
func UnlessServerError(status int) bool { return status < 500 }

// countedHit is what a mount counted for one request: enough to give it back.
type countedHit struct {
	key   string
	start time.Time // the epoch it was counted in (see takeBack)
	n     int64
}

// settle gives back h, counted for a request l served with verdict v, when
// Options.CountStatus does not count the final status. A verdict that
// refused counted nothing (a dry run serves it anyway), so nothing is given
// back for it.
func (l *Limiter) settle(h countedHit, v Verdict, status int) {
	if l.opt.CountStatus == nil || !v.Allowed || h.key == "" || l.opt.CountStatus(status) {
		return
	}
	l.takeBack(h.key, h.start, h.n)
}

// serveSettling runs next, then calls settle with the status it answered:
// what it passed to WriteHeader, 200 when it wrote nothing (net/http's
// answer then), and 500 when it panicked before writing a status (the
// answer a recovering middleware gives; the panic goes on unrecovered, so
// its stack is the handler's). The writer next sees keeps the Flusher,
// Hijacker and ReaderFrom of w.
func serveSettling(next http.Handler, w http.ResponseWriter, r *http.Request, settle func(status int)) {
	ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
	returned := false
	defer func() {
		status := ww.Status()
		switch {
		case status != 0:
		case returned:
			status = http.StatusOK
		default:
			status = http.StatusInternalServerError
		}
		settle(status)
	}()
	next.ServeHTTP(ww, r)
	returned = true
}
