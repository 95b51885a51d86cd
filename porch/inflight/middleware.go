package inflight

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// Handler is the limiter as plain chi middleware: the slot is taken before
// next runs and given back once next has returned, its response written,
// whether it returned, panicked (the panic goes on up) or gave up on a
// client that hung up. The RateLimit fields are set before next runs. A
// request that holds a slot of l already, mounted further out on the
// route, passes on without taking another.
//
// Mount it inside any http.TimeoutHandler: outside, the slot would be given
// back at the timeout's 503 while the handler still runs.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if holds(r, l) {
			next.ServeHTTP(w, r)
			return
		}
		res, release, free, r := l.admit(r)
		if res != nil {
			res.Write(w)
			return
		}
		if release == nil { // exempt (porch.ErrSkip)
			next.ServeHTTP(w, r)
			return
		}
		defer release()
		l.setHeaders(w.Header(), free)
		next.ServeHTTP(w, r)
	})
}

// Before takes the request's slot, or answers 429 or 503. It implements
// porch.Middleware: in a porch.Chain, After gives the slot back once the
// handler's response is buffered, and the chain runs After on a panic too.
func (l *Limiter) Before(r *http.Request) (*http.Request, *porch.Response) {
	if holds(r, l) {
		// A mount further out holds the slot and gives it back when it
		// is done: pass on a copy, which After does not recognise as the
		// request that took it.
		return r.WithContext(r.Context()), nil
	}
	res, _, _, r := l.admit(r)
	return r, res
}

// After gives back the slot Before took, and puts the RateLimit fields on
// the response. It implements porch.Middleware.
func (l *Limiter) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	h, ok := r.Context().Value(holdKey{l}).(*hold)
	if !ok || h.r != r {
		return
	}
	h.after.Do(func() {
		h.release()
		if res.Header == nil {
			res.Header = make(http.Header)
		}
		l.setHeaders(res.Header, h.free)
	})
}

// holdKey marks, in a request's context, the slot l holds for it.
type holdKey struct{ l *Limiter }

// hold is the slot a request holds, and the request that took it: only
// the After of the Before that took it gives it back, never an inner
// mount's, which sees a copy.
type hold struct {
	after   sync.Once // After's work, done once
	release func()
	free    int64
	r       *http.Request
}

// holds reports whether r holds a slot of l already.
func holds(r *http.Request, l *Limiter) bool {
	_, ok := r.Context().Value(holdKey{l}).(*hold)
	return ok
}

// admit keys r and takes its slot. It returns the response that refuses
// it, or the slot's release (nil for an exempt request) with the slots
// left free and the request to pass on, marked as holding it.
func (l *Limiter) admit(r *http.Request) (*porch.Response, func(), int64, *http.Request) {
	key, err := l.key(r)
	if errors.Is(err, porch.ErrSkip) {
		return nil, nil, 0, r
	}
	if err != nil {
		l.observe(r.Context(), Unavailable)
		return l.failure(r, err), nil, 0, r
	}
	release, held, err := l.acquire(r.Context(), key)
	switch {
	case errors.Is(err, ErrLimited):
		l.observe(r.Context(), Limited)
		return l.refusal(), nil, 0, r
	case err != nil:
		l.observe(r.Context(), Unavailable)
		return l.failure(r, err), nil, 0, r
	}
	l.observeAdmitted(r.Context(), release)
	h := &hold{release: release, free: l.limit - held}
	r = r.WithContext(context.WithValue(r.Context(), holdKey{l}, h))
	h.r = r
	return nil, release, h.free, r
}

// keyError wraps a KeyFunc's error, so that failure answers it 500.
type keyError struct{ err error }

func (e *keyError) Error() string { return "inflight: KeyFunc: " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// key is the slot key r is counted under: the limiter's prefix, then the
// principal Options.KeyFunc returns, or else the client address.
func (l *Limiter) key(r *http.Request) (string, error) {
	if l.opt.KeyFunc != nil {
		k, err := l.opt.KeyFunc(r)
		if errors.Is(err, porch.ErrSkip) {
			return "", err
		}
		if err != nil {
			return "", &keyError{err}
		}
		if k != "" {
			return l.prefix + "p:" + k, nil
		}
	}
	b := append([]byte(l.prefix), "ip:"...)
	n := len(b)
	b, rewritten := clientip.AppendKey(b, r, l.opt.TrustProxy)
	if len(b) == n {
		return "", &keyError{errNoAddr}
	}
	if rewritten {
		l.warned.Do(func() {
			logctx.Logger(r.Context(), l.opt.Logger).Warn("inflight: "+clientip.RewrittenWarning, "limiter", l.opt.Name, "remote_addr", r.RemoteAddr)
		})
	}
	return string(b), nil
}

// errNoAddr is key's error for a request with no client address (built
// with http.NewRequest): every such request would share one key.
var errNoAddr = errors.New("the request has no client address to key it by (RemoteAddr is empty)")
