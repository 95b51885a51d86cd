// Package rate is porch's durable, exact rate limiter: fixed windows (the
// default), sliding windows or GCRA, chosen by Options.Algorithm (see
// docs/algorithms.md for what each allows at a window's edge).
//
// Every request asks its key's pool actor for a verdict, and the verdict
// reaches the client only after the write that covers it has committed. On
// SQLite the actor is the only writer of its keys, so it keeps their counts
// in memory, decides, and hands the new count to the store's committer; on
// a shared store (PostgreSQL, Redis) the store decides each hit atomically,
// on its own clock. Counting is therefore exact under any parallelism (no
// read-modify-write runs on a handler goroutine) and survives a restart,
// including a kill -9: every request that was answered 2xx is counted in
// the store (on Redis, one that persists with appendfsync always).
//
// A saturated pool or a failed write answers 503 with Retry-After: a limiter
// that stops counting under load would make overload the bypass.
//
// On a shared store (PostgreSQL, Redis) a key the store refused is
// answered from memory, without a round trip, until the store would allow
// it again and for at most Options.RefusalCacheFor (1s): a Reset on
// another instance is honoured within that bound, one on this instance at
// once.
//
// Both answers are problem+json by default. Options.LimitResponse and
// Options.ErrorResponse render others in their place (an HTML page, an
// API's own error shape), as go-chi/httprate's WithLimitHandler and
// WithErrorHandler do; the limiter still sets Retry-After and the
// rate-limit headers, and still serves nothing it could not count.
// Options.ProblemBase moves the problem types under an application's URI.
//
// Options.Observer is told every decision as an [Outcome] with its
// [Verdict]; the metrics adapters (porch/metrics/prom, porch/metrics/otel)
// implement [Observer].
//
//	pool := porch.NewPool(porch.PoolOptions{})
//	st, _ := sqlite.Open("app.db", sqlite.Options{})
//	lim, err := rate.New(pool, st, 100, time.Minute, rate.Options{})
//	if err != nil { ... }
//	r := chi.NewRouter()
//	r.Use(lim.Handler)
//
// A limiter counts a request once, however often the route mounts it and
// whatever copies middlewares make of it (r.WithContext, r.Clone,
// http.StripPrefix): with r.Use(lim.Handler) above and
// porch.Chain(lim, keys) on one route, or lim alone and in a Set, the
// mount further out counts it and the others pass it on uncounted,
// reporting that count. Two different limiters each count it. The mark,
// the limiter, the client key it counted and the request's RequestURI
// (the raw request-target the server read), is in the request's context,
// which every copy keeps; a mount further in passes the request on only
// when its KeyFunc names the same key and the RequestURI is the same. A
// sub-request built on that context is counted as a request of its own
// when it is for another key (a batch endpoint replaying an operation for
// another user) or built with http.NewRequestWithContext (which leaves
// RequestURI empty); a copy of the request for the same key
// (r.WithContext, r.Clone) passes as the request it came from, unless it
// is built on CountAgain, which counts a request however it was built:
//
//	op, _ := http.NewRequestWithContext(rate.CountAgain(r.Context()), http.MethodPost, "/orders", body)
//	op.RemoteAddr = r.RemoteAddr // a new request has none, and keyed by address one without is a 500
//	router.ServeHTTP(rec, op)
//
// A request with no RequestURI (one a test builds with http.NewRequest) is
// handed on by the mount that counts it with r.URL.RequestURI(), as a
// server would have read it.
//
// Each mount runs the KeyFunc. One that keys the request differently from
// a mount further out (a principal that an authentication middleware
// between them resolved) counts it against that key too, and one whose
// KeyFunc skips or fails it answers as it would mounted alone.
//
// # Panics and errors
//
// New follows chi's rule. A programming error panics at construction with a
// "rate: " message, before any I/O: a nil pool or store, a store that keeps
// no counters, a limit below 1 or above MaxLimit, a window under a
// millisecond or above MaxWindow, an Options.Name that a counter key or a
// header cannot hold, an option the store would ignore (Options.Lease and
// Options.RefusalCacheFor are for a shared store, Options.WriteAhead for
// a store that is its counters' only writer: SQLite, the memory store). An
// error is
// returned only for what the store answers: the policy refused
// (store.ErrPolicyConflict), or the store failing to record the policy or
// to load the open windows. Past New the limiter does not panic: a hit it
// cannot count is a 503 (Before, Handler) or an error (Allow, AllowN); a
// failing KeyFunc or a Weight below 1 is a 500.
//
// # Who a client is, and chi's middleware.RealIP
//
// By default a client is the connection's peer address (an IPv6 client by
// its /64), which it cannot forge; X-Forwarded-For is read only with
// Options.TrustProxy, and then only as chi's client-IP middleware resolved
// it. Do not use chi's middleware.RealIP with this limiter: it rewrites
// r.RemoteAddr from X-Forwarded-For, X-Real-IP or True-Client-IP before the
// limiter runs, so with TrustProxy off a client that forges a new header on
// every request gets a new counter every time, and is never refused. The
// limiter cannot recover the real peer once it is overwritten; it logs a
// warning once when it sees a RemoteAddr without a port, which net/http
// never produces and RealIP always does. Behind a proxy you control, use
// middleware.ClientIPFromXFFTrustedProxies and TrustProxy instead.
//
// Outside a handler, count by principal (an API key, a user id) with
// lim.Allow(ctx, "user42"); it shares its counter with requests whose
// Options.KeyFunc returns that principal.
//
// # Peek and reset
//
// lim.Peek(ctx, "user42") reports what Allow would answer for one more
// request, without counting it. lim.Reset(ctx, "user42") starts the
// principal's window over, empty, for a full window from now: clear a
// login counter after a successful login. Both go through the key's actor,
// like a hit, so a reset is ordered with the hits around it: one answered
// before Reset was called is cleared, one sent after it returned is
// counted. Reset returns once the reset is in the store, so a restart
// (even a kill -9) does not bring the old count back. On SQLite, Peek
// reports the count the actor decides on, which may include hits still
// waiting for their write; on a shared store, the count committed.
//
// # Keys, weights and dry run
//
// Options.KeyFunc, a [porch.KeyFunc], names what a request is counted
// against: a user ([porch.KeyByHeader] on a header your authentication
// set), a route ([porch.KeyByRoute]), or several joined by
// [porch.JoinKeys]. It exempts a request with [porch.ErrSkip] (served,
// uncounted, without headers); any other error fails the request closed
// with a 500 of type rate-key-failed, because serving it uncounted would
// make a failing lookup a way around the limit.
//
// Options.Weight and AllowN count a request as n: it is allowed only if its
// window's count plus n is within the limit. A weight above the limit is
// refused with ErrOverLimit (413, rate-weight-over-limit), never counted, because
// no window could ever allow it and a 429 would invite retries. A refused
// request changes nothing, on any store: a lighter request after a
// refused heavy one is still allowed if it fits.
//
// # Several limits on one route
//
// A burst limit and an hourly one (or one per user and one per address)
// are two limiters, each of its own Name, combined with All:
//
//	burst, _ := rate.New(pool, st, 100, time.Minute, rate.Options{Name: "burst"})
//	hourly, _ := rate.New(pool, st, 1000, time.Hour, rate.Options{Name: "hourly"})
//	r.Use(rate.All(burst, hourly).Handler)
//
// The Set counts the request against both at once and answers as one: a
// 429 is wholly the refusing policy's (Retry-After, X-RateLimit-*,
// RateLimit and its LimitResponse; when both refuse, the one whose window
// closes last), an allowed request reports the policy with the least
// remaining, and RateLimit-Policy lists both: "burst";q=100;w=60,
// "hourly";q=1000;w=3600. A refused request changes nothing here either:
// the hits the other limiters counted for it are given back (see Set for
// the two ways a give-back can come late, both on the safe side). Simply
// chained limiters do not contradict each other, but the first keeps
// counting what the second refuses: use All.
//
// There is no per-request limit: a Name's limit is a policy that New
// records and checks across instances, and that RateLimit-Policy announces;
// a limit that varied per request would make both untrue. Give each tier
// its own limiter (its own Name) and let Tiers pick one per request:
//
//	r.Use(rate.Tiers(planOf, map[string]rate.Tier{"free": free, "paid": paid}).Handler)
//
// A request whose tier cannot be told is a 500, as a failing KeyFunc is.
//
// Options.CountStatus counts only some outcomes: with rate.Failures, a
// login limiter counts failed attempts only. Every hit is counted before
// its handler runs, so parallel attempts cannot pass the limit meanwhile;
// one whose final status does not count is given back after it.
//
// Options.DryRun counts and reports but never refuses, for rolling out a
// new limit: a request over it is served with X-RateLimit-Dry-Run: limited
// beside the usual headers, and logged at most once per 10 s (with how many
// were held back).
//
// # Problem types
//
// The limiter's own answers are application/problem+json (RFC 9457), with
// a type clients may switch on, under "https://porch.dev/problems/" or
// Options.ProblemBase:
//
//   - rate-limited: 429, over the limit; Retry-After says when to come back.
//   - rate-unavailable: 503, the request could not be counted (a saturated
//     pool, a failed write); it was not served.
//   - rate-key-failed: 500, Options.KeyFunc or Options.Weight failed.
//   - rate-weight-over-limit: 413, the request weighs more than the limit.
package rate
