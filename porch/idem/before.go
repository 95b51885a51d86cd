package idem

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/writeonce/porch-go/porch"
)

// Before decides the request's outcome. It implements porch.Middleware.
func (m *Keys) Before(r *http.Request) (*http.Request, *porch.Response) {
	if !slices.Contains(m.methods, r.Method) {
		return r, nil
	}
	key, err := parseKey(r, m.keyHeader)
	if errors.Is(err, errKeyMissing) {
		if !m.opt.RequireKey {
			return r, nil
		}
		m.observe(r, Invalid)
		return r, m.problem(problemKeyRequired, http.StatusBadRequest, m.keyHeader+" required",
			"this endpoint requires an "+m.keyHeader+" header")
	}
	if err != nil {
		m.observe(r, Invalid)
		return r, m.problem(problemKeyInvalid, http.StatusBadRequest, "Invalid "+m.keyHeader,
			strings.ReplaceAll(err.Error(), defaultKeyHeader, m.keyHeader))
	}
	principal, err := m.principal(r)
	if errors.Is(err, porch.ErrSkip) {
		return r, nil
	}
	if err != nil {
		m.errs.Error(r.Context(), "idem: Options.Principal failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return r, m.problem(problemPrincipalFailed, http.StatusInternalServerError, "Principal failed",
			"the request's principal could not be told, so its key could not be scoped")
	}
	digest, res := m.digest(r)
	if res != nil {
		m.observe(r, Invalid)
		return r, res
	}
	key = m.scope(r, principal, key)
	if outer := owned(r, m.store, key); outer != nil {
		// A middleware further out (another one, or m itself mounted
		// twice) already owns this key on this store for this very
		// request, and will store its response: leading it again would
		// wait on its own reservation forever. This request stores
		// nothing, so its After must not find the outer ownership.
		if !sameRequest(outer.digest, digest) {
			m.observe(r, Mismatch)
			return r, m.problem(problemKeyReused, http.StatusUnprocessableEntity, m.keyHeader+" reused",
				"an enclosing request owns this key for a different method, path or body")
		}
		return r.WithContext(context.WithValue(r.Context(), ownershipKey{m}, (*ownership)(nil))), nil
	}
	return m.decide(r, key, digest)
}
