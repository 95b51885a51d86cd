package rate

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

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

// Limiter allows Limit requests per key per Window, by its
// Options.Algorithm: in fixed windows that open at a key's first request
// (the default), in sliding windows, or as a GCRA bucket. Time is measured
// on the store's monotonic timeline (SQLite) or the shared store's clock
// (PostgreSQL, Redis), so a wall-clock jump (even across a restart) grants no
// extra allowance.
//
// A Limiter is safe for concurrent use. Create it with [New]; the zero
// value is not usable.
type Limiter struct {
	pool     *actor.Pool
	store    driver.Counters
	counting counting // local or shared, chosen by the store
	rule     rule     // Options.Algorithm with the limit, window and burst
	limit    int64
	most     int64 // the heaviest request that can fit: limit, or GCRA's burst
	window   time.Duration
	ahead    int64 // Options.WriteAhead, resolved
	opt      Options
	policy   string // RateLimit-Policy value, fixed per limiter
	// Header values fixed per limiter, built once.
	limitValue, policyValue []string
	rateLimitPrefix         string
	prefix                  string      // counter key prefix
	release                 func()      // ends the store's claim of this limiter's policy
	closed                  atomic.Bool // set by Close: later hits fail with porch.ErrClosed
	warnRewritten           sync.Once
	dryLog                  throttledLog // would-be refusals in DryRun
	calls                   sync.Pool    // of *call, see allow
	errs                    *errlog.Log  // for Options.Logger; nil: the process's
}

// MaxLimit is the largest limit New accepts, and so the heaviest request a
// limiter can allow. 2^40 (about 1.1e12 requests per window) is beyond any
// rate a server meets, and keeps every sum over counts exact in int64 with
// room to spare: a count never passes its limit, so count + n stays under
// 2^41 in memory; PostgreSQL adds all of a batch's hits of one key to the
// stored count before it takes the refused ones back out, a sum of at most
// (MaxBatch+1)·2^40, which int64 holds for batches of up to 2^23-1 writes,
// 2048 times the default MaxBatch (4096). It is also below 2^53, so a client that
// parses X-RateLimit-Remaining into a float64 (JavaScript) reads it
// exactly. Near int64's range, by contrast, count + n wraps negative and a
// limiter would serve past its limit.
const MaxLimit = algorithm.MaxLimit

// MaxWindow is the longest window New accepts: 100 years of 365 days. A
// time.Duration holds about 292 years, and the limiter adds to spans as
// long as a window (rounding up to whole seconds for Retry-After and
// RateLimit-Policy, a millisecond to wake the timer that forgets closed
// windows): within a second of that range the sums wrap negative, and a
// refusal would say "retry after 1 second" for a window of centuries.
const MaxWindow = algorithm.MaxWindow

// New returns a limiter of limit requests per window, counted by pool's
// actors and persisted in st. A window is rounded up to the millisecond,
// the stores' resolution: one with a remainder would otherwise be stored
// shorter than it counts, and close early after a restart.
//
// With a store that is its counters' only writer (SQLite) each actor keeps
// its keys' counts in memory and writes them through; New loads the counters
// of still-open windows, so a restart resumes them. With a shared store
// (PostgreSQL, Redis) every hit is one atomic step on the store: a
// statement, or a script.
//
// Limiters on one store are told apart by Options.Name, and New refuses
// (store.ErrPolicyConflict) a second limiter of one Name with another limit
// or window while the first counts: they would write the same rows, each by
// its own rule. On a shared store that holds across instances: while any
// running instance counts a Name under one policy, an instance with another
// is refused; once they have all stopped, the first to start records its
// policy (a deploy that changes it). Close frees the Name. A policy changed
// between runs applies to windows still open: their counts are kept, the
// new limit applies to them at once, and each closes at its old end or one
// new window from now, whichever is sooner.
//
// New panics, with a "rate: " message, on a programming error: a nil pool
// or store, a store of a program's own that keeps no counters a limiter
// can use, a limit outside 1 to MaxLimit, a window under
// a millisecond or over MaxWindow, an Options.Name that is not a valid name
// (see Options.Name), an Options.ProblemBase that is not a URI, an
// Options.Algorithm that is none of the constants, an Options.Burst that
// is negative, over MaxLimit or one the algorithm refuses (see
// Options.Burst), an Options.Lease that is negative, over MaxLimit or set
// with an algorithm that counts every hit in the store (GCRA), or an
// option the store would ignore: Options.Lease or Options.RefusalCacheFor
// with a store that is its counters' only writer (SQLite, memory),
// Options.WriteAhead with a shared store (PostgreSQL, Redis). It checks
// all of these before any I/O. It returns an error only for what the
// store answers: the policy refused (store.ErrPolicyConflict), or the
// store failing to record the policy or to load the open windows.
func New(pool *porch.Pool, st store.Counters, limit int, window time.Duration, opt Options) (*Limiter, error) {
	l := newLimiter(pool, st, limit, window, opt)
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// newLimiter is New's half that does no I/O: it checks the arguments,
// panicking on a programming error, and builds the limiter.
func newLimiter(pool *porch.Pool, st driver.Counters, limit int, window time.Duration, opt Options) *Limiter {
	if pool == nil {
		panic("rate: New expects a non-nil pool")
	}
	if isNil(st) {
		panic("rate: New expects a non-nil store")
	}
	if limit < 1 {
		panic(fmt.Sprintf("rate: New expects limit >= 1, got %d", limit))
	}
	// int64: MaxLimit does not fit a 32-bit int, where no limit passes it.
	if int64(limit) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects limit <= rate.MaxLimit (%d), got %d", int64(MaxLimit), limit))
	}
	if window < time.Millisecond {
		panic(fmt.Sprintf("rate: New expects window >= 1ms, got %s", window))
	}
	if window > MaxWindow {
		panic(fmt.Sprintf("rate: New expects window <= rate.MaxWindow (%s), got %s", MaxWindow, window))
	}
	// The stores keep windows and starts to the millisecond: a window
	// with a remainder was stored rounded down, and a restart closed it
	// that much early (a free allowance). Rounded up, it is held a little
	// longer instead: the safe side. MaxWindow is whole milliseconds, so
	// this cannot pass it.
	window = algorithm.WholeMS(window)
	if opt.Name == "" {
		opt.Name = "default"
	}
	if !validName(opt.Name) {
		panic(fmt.Sprintf(`rate: New expects an Options.Name of printable ASCII without '"', '\' or ':', got %q`, opt.Name))
	}
	if !problemtype.Valid(opt.ProblemBase) {
		panic(fmt.Sprintf("rate: New expects an Options.ProblemBase that is a URI, got %q", opt.ProblemBase))
	}
	alg, ok := algorithm.At(int(opt.Algorithm))
	if !ok {
		panic(fmt.Sprintf("rate: New expects Options.Algorithm %s, got %s", algorithm.Names(), opt.Algorithm))
	}
	if opt.Burst < 0 || int64(opt.Burst) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects Options.Burst from 0 to rate.MaxLimit (%d), got %d", int64(MaxLimit), opt.Burst))
	}
	r, err := alg.Rule(int64(limit), window, int64(opt.Burst))
	if err != nil {
		panic(fmt.Sprintf("rate: New expects a limit, window and Options.Burst that %s counts with: %v", opt.Algorithm, err))
	}
	if opt.Lease < 0 || int64(opt.Lease) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects Options.Lease from 0 to rate.MaxLimit (%d), got %d", int64(MaxLimit), opt.Lease))
	}
	if opt.Lease != 0 && !alg.Leases() {
		panic(fmt.Sprintf("rate: New expects Options.Lease with %s, not %s", algorithm.NamesIf(algorithm.Algorithm.Leases), opt.Algorithm))
	}
	_, exclusive := st.(driver.ExclusiveCounters)
	if _, shared := st.(driver.SharedCounters); !exclusive && !shared {
		panic(fmt.Sprintf("rate: New expects a store with counters (driver.ExclusiveCounters or driver.SharedCounters), got %T", st))
	}
	checkStoreOptions(opt, st, exclusive)
	ahead := int64(opt.WriteAhead)
	switch {
	case ahead == 0:
		ahead = defaultWriteAhead
	case ahead < 0:
		ahead = 0
	}
	l := &Limiter{
		pool: actor.Of(pool), store: st, limit: int64(limit), window: window, ahead: ahead, opt: opt,
		rule:   r,
		policy: fmt.Sprintf(`%q;q=%d;w=%d`, opt.Name, limit, problemtype.RetryAfter(window)),
		prefix: "rate:" + opt.Name + ":",
	}
	if opt.Logger != nil {
		l.errs = errlog.New(clock.System{}, 0, opt.Logger)
	}
	l.most = l.rule.Most()
	l.limitValue = []string{strconv.FormatInt(l.most, 10)}
	l.policyValue = []string{l.policy}
	l.rateLimitPrefix = `"` + opt.Name + `";r=`
	l.calls.New = l.newCall
	if exclusive {
		l.counting = newLocal(l.countingConfig(), st.(driver.ExclusiveCounters), l.prefix, ahead)
	} else {
		l.counting = newSharedCounting(l.countingConfig(), st.(driver.SharedCounters), opt)
	}
	return l
}

// checkStoreOptions panics on an option that st's kind of store would
// ignore: Lease and RefusalCacheFor save round trips to a shared store,
// WriteAhead saves writes of counts held in memory. Set on the other kind
// they would change nothing, and a limiter that silently runs without what
// its caller asked for is a configuration bug found in production. Zero is
// "not set" and fits every store; a negative value asks for a behaviour
// (no cache, exact writes) that only its own kind has, so it is refused
// on the other too.
func checkStoreOptions(opt Options, st driver.Counters, exclusive bool) {
	if exclusive {
		if opt.Lease != 0 {
			panic(fmt.Sprintf("rate: New expects Options.Lease only with a shared store (PostgreSQL, Redis), got Lease %d with %T, its counters' only writer: it counts in memory already, and writes ahead instead (Options.WriteAhead)", opt.Lease, st))
		}
		if opt.RefusalCacheFor != 0 {
			panic(fmt.Sprintf("rate: New expects Options.RefusalCacheFor only with a shared store (PostgreSQL, Redis), got %s with %T, its counters' only writer: it decides every hit in memory, with no round trip for a cache to save", opt.RefusalCacheFor, st))
		}
		return
	}
	if opt.WriteAhead != 0 {
		panic(fmt.Sprintf("rate: New expects Options.WriteAhead only with a store that is its counters' only writer (SQLite, memory), got WriteAhead %d with %T, a shared store: it decides every hit itself, and counts a busy key ahead with Options.Lease instead", opt.WriteAhead, st))
	}
}

// validName reports whether name can go into a counter key and a header
// as it is (see Options.Name).
func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == ':' {
			return false
		}
	}
	return true
}

// isNil reports whether st is nil, or a nil pointer in an interface (what
// st, _ := sqlite.Open(...) leaves behind when the open failed).
func isNil(st driver.Counters) bool {
	if st == nil {
		return true
	}
	v := reflect.ValueOf(st)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// open is New's half that does I/O: it claims the limiter's policy in the
// store and loads what the store holds of it.
func (l *Limiter) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	release, err := l.store.ClaimPolicy(ctx, l.storePolicy())
	if err != nil {
		return fmt.Errorf("rate: %w", err)
	}
	l.release = release
	if err := l.counting.open(context.Background()); err != nil {
		release()
		return err
	}
	return nil
}

// storePolicy is the policy the store records for this limiter's Name.
func (l *Limiter) storePolicy() driver.Policy {
	return driver.Policy{Name: l.opt.Name, Limit: l.limit, Window: l.window, Algorithm: l.rule.Algorithm(), Burst: l.rule.Burst()}
}

// Close writes the exact count of every open window that was written ahead
// (see Options.WriteAhead), so that a clean shutdown leaves exact counts in
// the store, and frees the limiter's Name for another policy. Call it after
// the server has drained and before the pool and the store close; porch.App
// runs closers in that order when the limiter is registered after them. It
// returns the first write error, or ctx.Err(). A hit after Close fails
// with porch.ErrClosed (the middleware answers 503): the Name is free for
// another limiter, which must be the only one counting under it.
func (l *Limiter) Close(ctx context.Context) error {
	l.closed.Store(true)
	// The policy's name is free for another limiter once this one is done
	// counting, whether or not its flush finishes in time.
	defer l.release()
	return l.counting.close(ctx)
}

// claimTimeout bounds New's claim of its policy in a shared store.
const claimTimeout = 30 * time.Second
