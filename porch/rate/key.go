package rate

import (
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// appendClientKey appends the client half of a counter key (see
// clientip.Key) to dst. A RemoteAddr rewritten from a forgeable header is
// still keyed on, since the real peer is gone by then, but logged once per
// limiter: it lets a client choose its own counter.
func (l *Limiter) appendClientKey(dst []byte, r *http.Request) []byte {
	dst, rewritten := clientip.AppendKey(dst, r, l.opt.TrustProxy)
	if rewritten {
		l.warnRewritten.Do(func() {
			logctx.Logger(r.Context(), l.opt.Logger).Warn("rate: "+clientip.RewrittenWarning, "limiter", l.opt.Name, "remote_addr", r.RemoteAddr)
		})
	}
	return dst
}

// key is the counter key r is counted against: the limiter's prefix, then
// the principal Options.KeyFunc returns, or else the client
// address. It returns the KeyFunc's error as it is. The storage format
// stays inside the package, so that what a caller counts is always what
// load reads back after a restart.
func (l *Limiter) key(r *http.Request) (string, error) {
	var k string
	if l.opt.KeyFunc != nil {
		var err error
		if k, err = l.opt.KeyFunc(r); err != nil {
			return "", err
		}
	}
	if k != "" {
		return l.principalKey(k), nil
	}
	var buf [128]byte // the key is built here and copied into its string once
	b := append(append(buf[:0], l.prefix...), "ip:"...)
	n := len(b)
	if b = l.appendClientKey(b, r); len(b) == n {
		return "", errNoAddr
	}
	return string(b), nil
}

// errNoAddr is key's error for a request to key by address that has none:
// RemoteAddr is empty, as on a request built with http.NewRequest (a
// sub-request, a test). Every such request would share one counter, the
// requests of every client a batch endpoint replays together, so it fails
// closed, as a failing KeyFunc does.
var errNoAddr = errors.New("rate: the request has no client address to key it by (RemoteAddr is empty): set it on a request built in-process, or key it by a principal")

func (l *Limiter) principalKey(principal string) string { return l.prefix + "p:" + principal }
