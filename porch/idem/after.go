package idem

import (
	"context"
	"errors"
	"net/http"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// After stores the owner's response, with the writes its handler made
// through [Exec], and lets it out only once both are durable. A 5xx (or a
// status Options.StoreStatus refuses), a panic, or a refusal by a
// middleware after this one (the handler never ran) is not stored and the
// handler's writes are discarded: the key is handed back, and a waiting
// duplicate decides afresh. If the handler's writes fail at commit, or its
// body is larger than Options.MaxStoredBody, nothing is stored and the
// client gets a 500 problem instead of the handler's answer. It implements
// porch.Middleware.
func (m *Keys) After(r *http.Request, res *porch.Response, c porch.Completion) {
	o, _ := r.Context().Value(ownershipKey{m}).(*ownership)
	if o == nil {
		return
	}
	m.finish(o.flight, m.save(r, o, res, c))
}

// save stores the owner's response, or hands the key back, and says how
// its flight ended. Either way the reservation has ended when save returns,
// before the flight does: the duplicate that leads next needs the key's
// slot (on PostgreSQL, a key connection) free. A response that could not be
// stored is replaced by the problem its client gets instead.
func (m *Keys) save(r *http.Request, o *ownership, res *porch.Response, c porch.Completion) result {
	status := res.StatusCode()
	if c != porch.Handled || !m.stores(status) {
		o.hold.Release()
		return released()
	}
	if n := int64(len(res.Body)); n > m.opt.MaxStoredBody {
		// Sent unstored, a retry would run the handler again while its
		// writes stood: discard them, and say so.
		o.hold.Release()
		*res = *m.tooLarge(r, n)
		return released()
	}
	row := driver.Response{
		Key: o.flight.key, Digest: o.digest, Status: status,
		ContentType: res.Header.Get("Content-Type"), Body: res.Body,
		Header: kept(res.Header, m.keep),
	}
	if row.Body == nil {
		row.Body = []byte{} // an empty body (a 204) is a response, not a missing one
	}
	// The client may have gone; the response is stored all the same, so its
	// retry replays rather than runs the handler again.
	err := o.hold.Save(context.WithoutCancel(r.Context()), row, m.opt.TTL)
	switch {
	case err == nil:
		return stored(row)
	case errors.Is(err, store.ErrWriteFailed):
		*res = *m.writeFailed(r, err)
		return released() // nothing happened: the next duplicate may lead and try again
	default:
		*res = *m.unavailable(r, err)
		return failed(err)
	}
}

// stores applies Options.StoreStatus.
func (m *Keys) stores(status int) bool {
	if m.opt.StoreStatus == nil {
		return status < 500
	}
	return m.opt.StoreStatus(status)
}
