package rate

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// defaultWriteAhead is Options.WriteAhead's default.
const defaultWriteAhead = 256

// defaultRefusalCacheFor is how long, at most, a limiter on a shared store
// answers a refused key from memory when Options.RefusalCacheFor is zero.
const defaultRefusalCacheFor = time.Second

// Options configure a Limiter. The zero value keys on the connection's peer.
type Options struct {
	// Name scopes this limiter's counters, so that several limiters can share
	// one store, and names the policy in the RateLimit headers. Two limiters
	// with different limits or windows need different Names: New refuses a
	// second one under a Name in use (see New). A Name is printable ASCII
	// without '"', '\' or ':': it is quoted in the headers, and ':' ends it
	// in the counter keys, where limiters "a" and "a:p" could otherwise
	// write one row. If empty, "default".
	Name string
	// TrustProxy keys on the client IP resolved by chi's client-IP
	// middleware (middleware.ClientIPFromXFF, ClientIPFromXFFTrustedProxies,
	// ClientIPFromHeader), which must run before the limiter. Set it only
	// when a proxy you control overwrites that header; the limiter itself
	// never parses X-Forwarded-For. If false, the key is the connection's
	// peer address, which cannot be forged, unless a middleware such as
	// chi's middleware.RealIP has already overwritten it from a header:
	// never use RealIP with this limiter (see the package doc).
	TrustProxy bool
	// KeyFunc, if set, names the principal to count a request against (an
	// API key, a user id, a route: see [porch.KeyFunc], [porch.JoinKeys]),
	// exempts it with [porch.ErrSkip], or fails it. A request whose KeyFunc
	// fails with another error is not counted and not served: the
	// middleware answers 500 (application/problem+json of type
	// rate-key-failed) and logs the error, because serving it uncounted
	// would turn a failing lookup into a way around the limit. If nil, the
	// client address; so too when it returns "". A request with no client
	// address (RemoteAddr empty, as on one built with http.NewRequest) is
	// then answered 500 as well, rather than share one counter with every
	// other such request.
	//
	// It runs at each mount of the limiter a request meets, each time a
	// mount further in decides whether the request is one counted further
	// out (three times for lim.Handler around porch.Chain(rate.All(lim, b),
	// lim)), and so does Weight, and a Tiered's pick: each must be cheap and
	// give the same answer each time for one request. Resolve a costly
	// principal (a session lookup) once, in a middleware in front, and
	// have the KeyFunc read what it left on the request.
	KeyFunc porch.KeyFunc
	// Weight, if set, is what a request costs, at least 1 (a batch call, an
	// export, a search that costs as much as ten reads): the middleware
	// counts it as AllowN does. A weight below 1 fails the request with 500,
	// as a KeyFunc error does; a weight above the limit is answered 413 and
	// not counted (see AllowN). If nil, every request costs 1.
	Weight func(r *http.Request) int
	// Algorithm is how requests are counted against the limit: FixedWindow
	// (the zero value), SlidingWindow or GCRA. Every one counts exactly,
	// durably and fails closed; they differ at a window's edges (see
	// Algorithm).
	Algorithm Algorithm
	// Burst is how many requests GCRA lets arrive at once, on top of its
	// steady rate of limit per window. If zero, the limit. New panics if
	// it is set for another algorithm, above MaxLimit, or so deep that its
	// emission intervals (window/limit, rounded up, each) span more than
	// MaxWindow: a GCRA window near MaxWindow needs a burst below the
	// limit.
	Burst int
	// DryRun makes the middleware count and report but never refuse: for
	// rolling out a new limit. A request over the limit is served, with the
	// usual rate-limit headers and X-RateLimit-Dry-Run: limited (allowed
	// otherwise), and logged at INFO, at most once per 10 s with how many
	// were held back. A request that cannot be counted (a store failure, a
	// saturated pool, a failing KeyFunc) is served too, uncounted and
	// without headers, and logged. Counts are what enforcing would have
	// counted, so turning DryRun off later keeps them.
	// Allow and AllowN report true verdicts whatever DryRun says.
	DryRun bool
	// CountStatus, if set, decides from the final status of a request the
	// middleware served whether its hit stands: [Failures] limits failed
	// logins only (brute-force protection), [Successes] and
	// [UnlessServerError] spare a client the requests that failed it. The
	// hit is counted before the handler runs, as every hit is, so parallel
	// attempts cannot slip past the limit while their handlers run (with
	// a limit of 5, at most 5 handlers run at once, whatever they will
	// answer); a hit whose status does not count is given back after the
	// handler, through the key's actor, as a Set gives back a refused
	// request's hits (exact and ordered with the key's hits; a crash in
	// between can only over-count). Until it is given back, it holds room.
	//
	// The status is the final response's: under porch.Chain, what the
	// handler, or a middleware after the limiter, answered (500 if the
	// handler panicked); under Handler, what the handler passed to
	// WriteHeader, 200 if it wrote nothing (or hijacked the connection),
	// 500 if it panicked before writing a status. A refused request ran no
	// handler and counted nothing, so there is nothing to decide. With
	// DryRun a counted hit is given back just the same, so the counts stay
	// what enforcing would count. Allow and AllowN are not affected:
	// outside a handler, a caller that wants a hit back counts its
	// outcomes itself (or calls Reset). If nil, every hit stands.
	CountStatus func(status int) bool
	// RefusalCacheFor bounds how long a limiter on a shared store
	// (PostgreSQL, Redis) answers a refused key from memory: once the store has
	// refused a key's request of weight n, this process refuses the key's
	// requests of weight n or more itself, without a round trip, so that a
	// client hammering past its limit costs the database nothing. An entry
	// never outlives the moment the store would allow the request again
	// (Verdict.RetryAt, measured from before the store decided, less a
	// millisecond), so the cache refuses nothing the store would allow;
	// and it lives at most RefusalCacheFor, so that a Reset, or a hit
	// given back, on another instance is honoured here within that bound.
	// A Reset or a give-back on this instance clears the key's entry at
	// once. A cached refusal is answered with the verdict the store gave
	// (its Retry-After counting down to the same RetryAt) and observed as
	// Limited. If zero, 1s; negative asks the
	// store every time. It is for a shared store only: a store that is its
	// counters' only writer (SQLite, memory) decides every hit in memory
	// already, and New panics if it is set, to any non-zero value, with
	// one.
	//
	// The cache holds a 16-byte digest of each refused key, never the key,
	// so a client that picks long principals costs it no more than one
	// with short ones. It holds about 4 MiB per limiter (some 16,000
	// refused keys, split between the pool's actors); past that, a new
	// refusal takes the place of one chosen at random, whose key then
	// costs a round trip again. Expired refusals are let go within
	// RefusalCacheFor of expiring (checked at most every 100ms), with or
	// without more traffic, and Close lets go of all of them.
	RefusalCacheFor time.Duration
	// WriteAhead bounds how far ahead of a key's count the stored count may
	// run, with a store that is the counters' only writer (SQLite). Writing
	// ahead lets later hits answer without a write of their own once the
	// bound has committed. A crash can then over-count a key by up to this
	// many (the safe side for a limiter: a client may be refused early,
	// never served beyond its limit); Close writes the exact counts. If
	// zero, 256; negative writes every hit exactly. A shared
	// store (PostgreSQL, Redis) decides every hit itself, and New panics
	// if it is set, to any non-zero value, with one: Lease is its way to
	// count a busy key ahead.
	WriteAhead int
	// Lease lets a limiter on a shared store (PostgreSQL, Redis) count a
	// busy key's hits ahead, as WriteAhead does on SQLite: once a key hits
	// this process again within 100 ms, its store trips count up to
	// Lease hits more than the request needs (doubling from 1 while the key
	// stays busy), and the key's next requests are answered from those,
	// in memory, without a round trip. Every hit so answered was counted,
	// durably, before the lease was handed out, so the limit is never
	// exceeded and a crash can only over-count, by at most Lease per key.
	// The price is exactness across instances: while this process holds
	// hits it has not answered, another instance may refuse a request the
	// count would otherwise have allowed. A lease takes at most half of
	// what the store has left, so that near the limit leases shrink to
	// nothing and every hit is decided by the store; its hits are given
	// back once the key has been idle here for 100 ms, once the lease
	// stops answering near its window's end, and by Close. A Reset on this
	// process gives its lease back first; on another, which cannot reach
	// this one's memory, the new window counts the hits leases still hold,
	// so the limit holds across a Reset too (see Limiter.Reset). If zero,
	// every hit is decided by the store.
	//
	// GCRA counts every hit in the store (a lease's hits would be answered
	// later than the store counted them, which a token bucket would see as
	// a burst): New panics if Lease is set with it. It is for a shared
	// store only: New panics if it is set with a store that is its
	// counters' only writer (SQLite, memory), which counts in memory
	// already and writes ahead instead (WriteAhead). New panics too if it
	// is negative or above MaxLimit.
	Lease int
	// LimitResponse, if set, renders the answer to a request over its
	// limit in place of the problem+json 429, as httprate's
	// WithLimitHandler does: an HTML page, the body shape an API already
	// uses. v is the verdict that refused the request. The limiter then
	// sets Retry-After and the rate-limit headers on it, over any it set,
	// so that every refusal tells the client when to come back; a zero
	// Status is 429. It returns a response rather than being an
	// http.Handler because a porch chain buffers responses and the limiter
	// adds its headers last. If nil, or when it returns nil, the default.
	LimitResponse func(r *http.Request, v Verdict) *porch.Response
	// ErrorResponse, if set, renders the answer to a request the limiter
	// could not count (a saturated pool, a failed write), in place of the
	// problem+json 503, as httprate's WithErrorHandler does; err says why.
	// The limiter still fails closed (the handler does not run, whatever
	// this returns) and still logs a store failure. A zero Status is 503,
	// and Retry-After is 1 second unless it sets one. If nil, or when it
	// returns nil, the default.
	ErrorResponse func(r *http.Request, err error) *porch.Response
	// ProblemBase prefixes the type URI of the limiter's problems in place
	// of "https://porch.dev/problems/": with
	// "https://api.example.com/problems/", a refusal is
	// "https://api.example.com/problems/rate-limited". Clients switch on
	// the type, so an API that documents its own problem types wants them
	// under its own URI. If empty, the types are under
	// "https://porch.dev/problems/" (see the package doc).
	ProblemBase string
	// Observer is told of every request the limiter decides, with Name.
	// If nil, nothing is observed.
	Observer Observer
	// Logger receives what the limiter logs: a store failure (at most one
	// line of a kind every 10 seconds) and a client address rewritten
	// from a header. If nil, App.Logger for a request an App serves, else
	// slog.Default().
	Logger *slog.Logger
}
