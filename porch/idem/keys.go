package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/logctx"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Defaults for [Options].
const (
	DefaultTTL           = 24 * time.Hour
	DefaultMaxBody       = 1 << 20
	DefaultMaxStoredBody = 1 << 20
)

// ReplayedHeader marks a response served from the store rather than by the
// handler, with the value "true"; Options.ReplayedHeader renames it.
const ReplayedHeader = "Idempotency-Replayed"

// Options configure the middleware [New] returns. The zero value applies to
// POST and PATCH, accepts requests without a key, and keeps responses a day.
type Options struct {
	// Methods the middleware applies to. If nil, POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a request of those methods without a key.
	RequireKey bool
	// KeyHeader names the request header that carries the key, for clients
	// that send another (Fiber's default is X-Idempotency-Key). New panics
	// on a name that is not a field name. If empty, [Header],
	// "Idempotency-Key", the draft's.
	KeyHeader string
	// ReplayedHeader names the response header, set to "true", that marks
	// a replay (Stripe's is Idempotent-Replayed). New panics on a name
	// that is not a field name, that KeepHeaders names, or whose value a
	// replay must not set (Content-Type, Set-Cookie, the framing fields).
	// If empty, [ReplayedHeader], "Idempotency-Replayed".
	ReplayedHeader string
	// Principal scopes keys: two principals using the same key get separate
	// records. Set it to the authenticated account (the auth middleware
	// must run first), with the same key functions a limiter takes
	// (porch.KeyByHeader, porch.JoinKeys). If nil, or when it returns "",
	// a key is scoped by the client's address, as the rate limiter keys it
	// by default (the peer IP, an IPv6 client by its /64; see TrustProxy),
	// so that one client's stored response is never replayed to another
	// that sends the same key. A key is never global unless Principal makes
	// it so by returning one constant. [porch.ErrSkip] serves the request
	// without idempotency; any other error fails it with a 500 of type
	// idempotency-principal-failed, logged, and runs no handler.
	Principal porch.KeyFunc
	// TrustProxy scopes keys without a principal by the client address
	// chi's client-IP middleware resolved (middleware.ClientIPFromXFF,
	// ClientIPFromXFFTrustedProxies), as rate.Options.TrustProxy does; set
	// it behind a proxy you control, or every client behind it shares the
	// proxy's scope. If false, the connection's peer address.
	TrustProxy bool
	// TTL is how long a stored response is kept. If zero, DefaultTTL.
	TTL time.Duration
	// MaxBody is the largest request body accepted, in bytes; a larger one
	// is refused with 413 before anything is reserved. If zero,
	// DefaultMaxBody.
	MaxBody int64
	// StoreStatus reports whether a response of the given status is stored
	// and replayed to the key's retries. A response it refuses is sent as
	// it is and its handler's [Exec] writes are discarded, as a 5xx's are:
	// the writes commit only with the response they belong to, so that a
	// retry runs the handler again on a clean slate. Storing a 4xx keeps a
	// client's corrected retry under the same key from running: it is
	// replayed the stored 4xx (or, with a different body, refused 422)
	// until the TTL ends, so a client must send a new key with each
	// correction; not storing it lets the handler run on every retry,
	// which is right only for answers whose handler changed nothing. A
	// handler or middleware that did not complete (a panic, a refusal) is
	// never stored. If nil, every status below 500.
	StoreStatus func(status int) bool
	// MaxStoredBody is the largest response body stored, in bytes. A
	// handler that answers a larger one, with a status that is stored, has
	// its Exec writes discarded and its answer withheld: its client gets
	// 500 (…/idempotency-response-too-large) saying nothing was done, and
	// the key is free for a retry. If zero, DefaultMaxStoredBody.
	MaxStoredBody int64
	// MaxWait bounds how long a duplicate waits for a running owner before
	// it is answered 409 with Retry-After, the draft's in-flight answer. If
	// zero, a duplicate waits as long as its request context lasts, and
	// for an owner on another instance at most the shared store's bound
	// (postgres.Options.Timeout).
	MaxWait time.Duration
	// KeepHeaders names the response headers, besides Content-Type, that
	// are stored with a response and replayed with it: Location on a 201,
	// ETag, Link. A named header the handler did not set is not replayed,
	// and neither is a stored one this list no longer names, so removing a
	// name stops its replay at once. Headers are dropped by default because
	// most describe the moment or the connection they were sent on (Date,
	// Set-Cookie, Retry-After, the rate-limit fields), and a replay is
	// another moment. New panics on a name that is not a field name, and on
	// one whose replay is always wrong: Set-Cookie, Date, Retry-After, the
	// framing and connection fields, and those porch sets itself. If nil,
	// only Content-Type is kept.
	KeepHeaders []string
	// Fingerprint returns what stands for the body in a request's digest,
	// which tells a retry (replayed) from a key reused for another request
	// (422). [FingerprintJSON] compares JSON bodies by their canonical form,
	// so a client that re-encodes its JSON on a retry is not refused;
	// [CanonicalJSON] does too, and refuses a body that has none. An error
	// is answered 400 (…/idempotency-body-invalid) before anything is
	// reserved. Changing it on a live route makes a retry of a request
	// stored under the old one 422, unless both give its body the same
	// fingerprint. It must not change body, which the handler reads next.
	// If nil, the body byte for byte; a 422 for a JSON body of at most
	// 4 KiB that differs from the first only in how its JSON is written
	// then says so, and names FingerprintJSON.
	Fingerprint func(body []byte) ([]byte, error)
	// ProblemBase prefixes the type URI of every problem the middleware
	// answers with, in place of "https://porch.dev/problems/": with
	// "https://api.example.com/problems/", a reused key is
	// "https://api.example.com/problems/idempotency-key-reused". Clients
	// switch on the type, so an API that documents its own problem types
	// wants them under its own URI. If empty, the Problem… constants.
	ProblemBase string
	// Observer is told the outcome of every keyed request (see
	// [Outcome]). If nil, nothing is observed.
	Observer Observer
	// Logger receives what the middleware logs: a store failure or a
	// handler's failed writes (at most one line of a kind every 10
	// seconds) and a client address rewritten from a header. If nil, App.Logger for a request an App serves, else
	// slog.Default().
	Logger *slog.Logger
}

// Keys is the idempotency-key middleware: it keeps the Idempotency-Keys of
// the requests it guards, in flight on its pool's actors and answered in its
// store, so that each key's handler runs once. Use it as a porch.Middleware
// (in [porch.Chain]) or as chi middleware through [Keys.Handler].
//
// Create it with [New]; the zero value is not usable. It is safe for
// concurrent use.
type Keys struct {
	pool    *actor.Pool
	store   driver.KeyStore
	opt     Options
	shards  []*shard // indexed by pool shard; shards[i] is touched only by actor i
	methods []string
	keep    []string // Options.KeepHeaders, canonical

	keyHeader, replayedHeader string // Options.KeyHeader and ReplayedHeader, canonical

	warnRewritten sync.Once
	errs          *errlog.Log // for Options.Logger; nil: the process's
}

// New returns the middleware, its in-flight state kept by pool's actors and
// its responses stored in st. It does no I/O, so it returns no error; like
// chi's middleware constructors, it panics on a programming error: a nil
// pool or store, a negative TTL, MaxBody, MaxStoredBody or MaxWait, a
// KeepHeaders name it may not keep, a KeyHeader or ReplayedHeader that is
// not a field name it may use, or a ProblemBase that is not a URI.
func New(pool *porch.Pool, st store.Keys, opt Options) *Keys {
	if pool == nil {
		panic("idem: New expects a pool")
	}
	if st == nil {
		panic("idem: New expects a store")
	}
	if opt.TTL < 0 || opt.MaxBody < 0 || opt.MaxWait < 0 || opt.MaxStoredBody < 0 {
		panic("idem: New expects TTL, MaxBody, MaxStoredBody and MaxWait >= 0")
	}
	if !problemtype.Valid(opt.ProblemBase) {
		panic(fmt.Sprintf("idem: New expects ProblemBase to be a URI, got %q", opt.ProblemBase))
	}
	if opt.TTL == 0 {
		opt.TTL = DefaultTTL
	}
	if opt.MaxBody == 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.MaxStoredBody == 0 {
		opt.MaxStoredBody = DefaultMaxStoredBody
	}
	m := &Keys{pool: actor.Of(pool), store: st, opt: opt, shards: make([]*shard, pool.Size())}
	if opt.Logger != nil {
		m.errs = errlog.New(clock.System{}, 0, opt.Logger)
	}
	m.methods = opt.Methods
	m.keyHeader, m.replayedHeader = headerNames(opt.KeyHeader, opt.ReplayedHeader)
	m.keep = keepHeaders(opt.KeepHeaders, m.replayedHeader)
	if m.methods == nil {
		m.methods = []string{http.MethodPost, http.MethodPatch}
	}
	for i := range m.shards {
		m.shards[i] = newShard()
	}
	return m
}

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

// ownershipKey finds m's ownership for After; ownerKey finds the innermost
// ownership for the handler's Exec and OperationID.
type (
	ownershipKey struct{ m *Keys }
	ownerKey     struct{}
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
			strings.ReplaceAll(err.Error(), Header, m.keyHeader))
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

// Handler is the middleware as plain chi middleware. It buffers the
// response, which idempotency needs: nothing may reach the client before the
// response is durable.
func (m *Keys) Handler(next http.Handler) http.Handler { return porch.Chain(m)(next) }

// scope makes the lookup key: the key under principal, or under the
// client's address when there is none, so that no client can ever read
// another's stored response. Lengths are spelled out so that no scope/key
// pair can be made to collide with another, and the two forms differ after
// "idem:" (a digit, or "ip:"). A principal's form is the one earlier
// versions stored.
func (m *Keys) scope(r *http.Request, principal, key string) string {
	if principal != "" {
		return principalKey(principal, key)
	}
	return addrKey(m.clientAddr(r), key)
}

// principal runs Options.Principal, if set.
func (m *Keys) principal(r *http.Request) (string, error) {
	if m.opt.Principal == nil {
		return "", nil
	}
	return m.opt.Principal(r)
}

// principalKey and addrKey are scope's two forms; Lookup and Forget make
// them too.
func principalKey(p, key string) string {
	return "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
}

func addrKey(a, key string) string {
	return "idem:ip:" + strconv.Itoa(len(a)) + ":" + a + ":" + key
}

// clientAddr is the scope of a request without a principal. A RemoteAddr
// rewritten from a forgeable header is still used, since the real peer is
// gone by then, but logged once: it lets a client pose as another.
func (m *Keys) clientAddr(r *http.Request) string {
	a, rewritten := clientip.Key(r, m.opt.TrustProxy)
	if rewritten {
		m.warnRewritten.Do(func() {
			logctx.Logger(r.Context(), m.opt.Logger).Warn("idem: "+clientip.RewrittenWarning, "remote_addr", r.RemoteAddr)
		})
	}
	return a
}

// replay renders a stored response: its status, body, content type and the
// stored headers keep still names. Other headers (Set-Cookie, Date) would
// be wrong to repeat, and are not stored.
func replay(s driver.Response, keep []string, marker string) *porch.Response {
	res := &porch.Response{Status: s.Status, Header: kept(s.Header, keep), Body: s.Body}
	if res.Header == nil {
		res.Header = make(http.Header)
	}
	if s.ContentType != "" {
		res.Header.Set("Content-Type", s.ContentType)
	}
	res.Header.Set(marker, "true")
	return res
}
