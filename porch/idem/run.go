package idem

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// ownership is what Before hands After (and the handler, through [Exec])
// through the request context: the flight the request leads, and its
// reservation of the key in the store.
type ownership struct {
	flight *flight
	digest []byte
	store  driver.KeyStore
	hold   driver.Reservation
	outer  *ownership // the request's ownership further out, if any
}

// ownershipKey finds m's ownership for After; ownerKey finds the innermost
// ownership for the handler's Exec and OperationID.
type (
	ownershipKey struct{ m *Keys }
	ownerKey     struct{}
)

// owned finds, among the keys the request already owns further out, key on
// st.
func owned(r *http.Request, st driver.KeyStore, key string) *ownership {
	o, _ := r.Context().Value(ownerKey{}).(*ownership)
	for ; o != nil; o = o.outer {
		if o.flight.key == key && o.store == st {
			return o
		}
	}
	return nil
}

// own hands r the key its flight leads: After finishes the flight, and the
// handler writes through hold with [Exec].
func (m *Keys) own(r *http.Request, f *flight, digest []byte, hold driver.Reservation) *http.Request {
	outer, _ := r.Context().Value(ownerKey{}).(*ownership)
	o := &ownership{flight: f, digest: digest, store: m.store, hold: hold, outer: outer}
	return r.WithContext(&ownerContext{Context: r.Context(), m: m, o: o})
}

// ownerContext is the request's context once it owns a key: it answers
// ownershipKey{m} and ownerKey{} with o, as two context.WithValue layers
// would, in one allocation instead of two.
type ownerContext struct {
	context.Context
	m *Keys
	o *ownership
}

func (c *ownerContext) Value(key any) any {
	switch k := key.(type) {
	case ownerKey:
		return c.o
	case ownershipKey:
		if k.m == c.m {
			return c.o
		}
	}
	return c.Context.Value(key)
}

// ErrNoOwner is returned by [Exec] when ctx is not the context of a request
// that owns an idempotency key: the request carried no key, or it is not
// behind the middleware.
var ErrNoOwner = errors.New("idem: the request does not own an idempotency key")

// Exec runs a write of the handler's in the same transaction that stores
// its response: the write and the stored response commit together, or
// neither does. This is what makes a side effect in the store's own
// database exactly-once through crashes, a failed save and a lost database
// session — a retry either replays the stored response or finds nothing
// done and runs the handler on a clean slate.
//
// Pass the handler's request context. On PostgreSQL the statement runs now,
// on the connection that holds the key, and its error is returned; on
// SQLite it is queued for the committer (the file's one writer) and runs
// just before the response is stored, so it cannot be read back within the
// request and its failure is learned at commit. Either way, if any write
// fails, nothing is stored, the writes are rolled back and the client gets
// a 500 problem instead of the handler's answer. A 5xx answer or a panic
// discards the writes as well. args must not be changed after the call.
//
// query is one statement and must not control the transaction: SQLite
// refuses BEGIN, COMMIT, ROLLBACK and savepoints; PostgreSQL fails the
// request when a statement ended the owner's transaction, but cannot undo
// what a COMMIT among them made durable.
//
// On SQLite the statement runs on the committer's connection, which every
// write of the process shares, so it may only write rows: INSERT, UPDATE
// and DELETE on the application's own tables. Any schema change (CREATE,
// DROP, ALTER, temporary objects included), PRAGMA, ATTACH, a write to a
// porch_* or sqlite_* table and load_extension are refused, and the
// owner's statements together must finish within sqlite.Options.ExecBudget
// (50 ms by default) or are interrupted. Either way only this request
// fails, as above: 500, nothing stored.
//
// Side effects outside the database (a payment provider's API) cannot join
// the transaction; pass [OperationID] to them as their idempotency key.
func Exec(ctx context.Context, query string, args ...any) error {
	o, ok := ctx.Value(ownerKey{}).(*ownership)
	if !ok {
		return ErrNoOwner
	}
	return o.hold.Exec(ctx, query, args...)
}

// operationSpace is the UUID namespace of OperationID.
var operationSpace = uuid.MustParse("6f1d0b8e-4a53-4b43-9c1e-7d6a5f0c2b19")

// OperationID returns a stable identifier for the operation the request's
// idempotency key names: the same for every retry of it, on every instance
// and across restarts, and different for another key or another principal.
// Send it to a downstream service as that call's own idempotency key, so
// that a handler run again after a crash (its first run's response never
// stored) does not repeat the downstream effect. ok is false when ctx is
// not the context of a request that owns a key.
func OperationID(ctx context.Context) (id string, ok bool) {
	o, ok := ctx.Value(ownerKey{}).(*ownership)
	if !ok {
		return "", false
	}
	return uuid.NewSHA1(operationSpace, []byte(o.flight.key)).String(), true
}
