package idem

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Defaults for [Options], as its fields document them.
const (
	defaultTTL           = 24 * time.Hour
	defaultMaxBody       = 1 << 20
	defaultMaxStoredBody = 1 << 20
)

// Options configure the middleware [New] returns. The zero value applies to
// POST and PATCH, accepts requests without a key, and keeps responses a day.
type Options struct {
	// Methods the middleware applies to. If nil, POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a request of those methods without a key.
	RequireKey bool
	// KeyHeader names the request header that carries the key, for clients
	// that send another (Fiber's default is X-Idempotency-Key). New panics
	// on a name that is not a field name. If empty, "Idempotency-Key", the
	// draft's.
	KeyHeader string
	// ReplayedHeader names the response header, set to "true", that marks
	// a replay (Stripe's is Idempotent-Replayed). New panics on a name
	// that is not a field name, that KeepHeaders names, or whose value a
	// replay must not set (Content-Type, Set-Cookie, the framing fields).
	// If empty, "Idempotency-Replayed".
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
	// TTL is how long a stored response is kept. If zero, 24 hours.
	TTL time.Duration
	// MaxBody is the largest request body accepted, in bytes; a larger one
	// is refused with 413 before anything is reserved. If zero, 1 MiB.
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
	// the key is free for a retry. If zero, 1 MiB.
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
	// so a client that re-encodes its JSON on a retry is not refused. An
	// error is answered 400 (…/idempotency-body-invalid) before anything is
	// reserved: a function that refuses a body that is not JSON and returns
	// FingerprintJSON's result for the rest is the strict form. Changing it
	// on a live route makes a retry of a request stored under the old one
	// 422, unless both give its body the same fingerprint. It must not
	// change body, which the handler reads next.
	// If nil, the body byte for byte; a 422 for a JSON body of at most
	// 4 KiB that differs from the first only in how its JSON is written
	// then says so, and names FingerprintJSON.
	Fingerprint func(body []byte) ([]byte, error)
	// ProblemBase prefixes the type URI of every problem the middleware
	// answers with, in place of "https://porch.dev/problems/": with
	// "https://api.example.com/problems/", a reused key is
	// "https://api.example.com/problems/idempotency-key-reused". Clients
	// switch on the type, so an API that documents its own problem types
	// wants them under its own URI. If empty, "https://porch.dev/problems/"
	// (the package doc lists the types).
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
		opt.TTL = defaultTTL
	}
	if opt.MaxBody == 0 {
		opt.MaxBody = defaultMaxBody
	}
	if opt.MaxStoredBody == 0 {
		opt.MaxStoredBody = defaultMaxStoredBody
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

// Handler is the middleware as plain chi middleware. It buffers the
// response, which idempotency needs: nothing may reach the client before the
// response is durable.
func (m *Keys) Handler(next http.Handler) http.Handler { return porch.Chain(m)(next) }

// observe tells Options.Observer the outcome of r. Every keyed request
// gets exactly one, from Before's path; a response After withholds (a
// failed save) keeps the outcome it was given.
func (m *Keys) observe(r *http.Request, o Outcome) {
	if m.opt.Observer != nil {
		m.opt.Observer.IdemOutcome(r.Context(), o)
	}
}
