// Package rate is porch's durable, exact fixed-window rate limiter.
//
// Every request asks its key's pool actor for a verdict. The actor is the only
// writer of its keys, so it keeps their counts in memory, decides, and hands
// the new count to the store's committer; the verdict reaches the client only
// after that write has committed. Counting is therefore exact under any
// parallelism (no read-modify-write runs on a handler goroutine) and survives
// a restart, including a kill -9: every request that was answered 2xx is in
// the table.
//
// A saturated pool or a failed write answers 503 with Retry-After: a limiter
// that stops counting under load would make overload the bypass.
//
// Both answers are problem+json by default. Options.LimitResponse and
// Options.ErrorResponse render others in their place (an HTML page, an
// API's own error shape), as go-chi/httprate's WithLimitHandler and
// WithErrorHandler do; the limiter still sets Retry-After and the
// rate-limit headers, and still serves nothing it could not count.
// Options.ProblemBase moves the problem types under an application's URI.
//
//	pool := porch.NewPool(porch.PoolOptions{})
//	st, _ := sqlite.Open("app.db", store.Options{})
//	lim, err := rate.New(pool, st, 100, time.Minute, rate.Options{})
//	if err != nil { ... }
//	r := chi.NewRouter()
//	r.Use(lim.Handler)
//
// # Panics and errors
//
// New follows chi's rule. A programming error panics at construction with a
// "rate: " message, before any I/O: a nil pool or store, a store that keeps
// no counters, a limit below 1, a window under a millisecond, an
// Options.Name that a counter key or a header cannot hold. An error is
// returned only for what the store answers: the policy refused
// (store.ErrPolicyConflict), or the store failing to record the policy or
// to load the open windows. Past New the limiter does not panic: a hit it
// cannot count is a 503 (Before, Handler) or an error (Allow).
//
// # Who a client is, and chi's middleware.RealIP
//
// By default a client is the connection's peer address (an IPv6 client by
// its /64), which it cannot forge; X-Forwarded-For is read only with
// Options.TrustProxy, and then only as chi's client-IP middleware resolved
// it. Do not use chi's middleware.RealIP with this limiter: it rewrites
// r.RemoteAddr from X-Forwarded-For, X-Real-IP or True-Client-IP before the
// limiter runs, so with TrustProxy off a client that forges a new header on
// every request gets a new counter every time (five rotated forged values
// all got 200 while the real client was at 429). The limiter cannot recover
// the real peer once it is overwritten; it logs a warning once when it sees
// a RemoteAddr without a port, which net/http never produces and RealIP
// always does. Behind a proxy you control, use
// middleware.ClientIPFromXFFTrustedProxies and TrustProxy instead.
//
// Outside a handler, count by principal (an API key, a user id) with
// lim.Allow(ctx, "user42"); it shares its counter with requests whose
// Options.Key returns that principal.
package rate
