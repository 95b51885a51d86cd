package rate

import (
	"net/http"

	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// clientKey is the client half of a counter key (see clientip.Key). A
// RemoteAddr rewritten from a forgeable header is still keyed on, since the
// real peer is gone by then, but logged once per limiter: it lets a client
// choose its own counter.
func (l *Limiter) clientKey(r *http.Request) string {
	key, rewritten := clientip.Key(r, l.opt.TrustProxy)
	if rewritten {
		l.warnRewritten.Do(func() {
			logctx.Logger(r.Context(), l.opt.Logger).Warn("rate: "+clientip.RewrittenWarning, "limiter", l.opt.Name, "remote_addr", r.RemoteAddr)
		})
	}
	return key
}

// key is the counter key r is counted against: the limiter's prefix, then
// the principal Options.Key returns, or else the client address. The
// storage format stays inside the package, so that what a caller counts
// is always what load reads back after a restart.
func (l *Limiter) key(r *http.Request) string {
	if l.opt.Key != nil {
		if k := l.opt.Key(r); k != "" {
			return l.principalKey(k)
		}
	}
	return l.prefix + "ip:" + l.clientKey(r)
}

func (l *Limiter) principalKey(principal string) string { return l.prefix + "p:" + principal }
