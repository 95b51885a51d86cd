// Package shed is porch's load shedder by criticality, after Stripe's
// worker-utilization load shedder: an instance serves at most a capacity
// of requests at once, and keeps a fraction of that capacity, the
// reserve, for the routes the application calls critical (a checkout, a
// login), so that when the instance is saturated the requests that earn
// money or let users in are the last to be refused, not the first.
//
// With capacity N and reserve F, a request arriving while n requests are
// in flight (counted by the Shedder, admitted and not yet answered) is
//
//   - admitted, whatever its class, while n < N − ⌊N×F⌋, that is while
//     fewer than N×(1−F) requests are in flight;
//   - admitted if it is critical, and refused if it is not, while
//     N − ⌊N×F⌋ ≤ n < N;
//   - refused, whatever its class, once n = N.
//
// So once N×(1−F) requests are in flight a request that is not critical
// gets 503, and critical ones get the rest of the capacity; ⌊N×F⌋ whole
// slots are the reserve. With N = 4 and F = 0.5, two requests in flight
// refuse a non-critical third, while a third and fourth critical request
// are admitted and a fifth is refused; with N = 10 and F = 0.25, eight
// are open to everyone and ⌊2.5⌋ = 2 are kept for critical requests. A
// product N×F within 1e-9 of a whole number (or within 1e-15 of it
// relatively, for large N) counts as that number, so that a reserve
// written in decimal (0.29 of 100, 0.0157 of 10⁹) keeps the slots it
// says (29, 15 700 000), not one fewer for the binary rounding of F.
//
// A refusal is 503 application/problem+json of type
// "https://porch.dev/problems/overloaded" with Retry-After. A request is
// in flight from its admission until its handler returns (the response
// written, or the handler panicked, or gave up on a client that hung up
// or a deadline that passed): the slot is given back by a deferred call,
// so no way out of the handler keeps it.
//
// Which requests are critical is the application's choice, in two ways
// that mix: Options.Critical, a function of the request, decides for
// [Shedder.Handler]; [Shedder.Critical] admits every request of the
// routes it is mounted on as critical, and can be mounted per route or
// per chi group. Options.Exempt names requests that are never counted
// nor refused (a health probe, which must answer while the instance is
// busiest); a route that mounts neither middleware is not counted either.
//
//	sh := shed.New(64, shed.Options{
//		Reserve:  0.25,
//		Critical: func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/checkout" },
//		Exempt:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
//	})
//	r := chi.NewRouter()
//	r.Use(sh.Handler) // outermost: before the rate limiter and any store work
//
// A request is counted once however often it meets the same Shedder: the
// mount further out decides, and one further in passes the request on
// (the mark is in the request's context, which every copy keeps). So
// under a router-wide r.Use(sh.Handler), a route that also mounts
// sh.Critical is still decided by Handler: say which routes are critical
// in Options.Critical there, or mount Handler per chi group and Critical
// on the critical routes outside it (see the package example).
//
// # Where to mount it
//
// Outermost, before the rate limiter (porch/rate), idempotency keys
// (porch/idem) and anything else that does work for a request: shedding
// protects the instance, and a request refused for load must cost no
// store round trip, no pool job and no key reservation. A shed request is
// therefore not counted against the client's rate limit, and a client
// that retries it after Retry-After is not punished twice.
//
// # Why atomics and not an actor
//
// The rate limiter and idempotency keys send each request's work to its
// key's pool actor, because their state is a keyed record in a store that
// one writer must read, decide on and write. A Shedder's whole state is one
// integer of this process: the requests it has admitted and not yet
// released. A compare-and-swap on that integer decides and counts in one
// indivisible step, so counting is exact under any parallelism (never
// more than N in flight, never a non-critical request admitted at or past
// its threshold) without a queue, a goroutine or a store; an actor would
// add a hand-off to every request, and a queue that itself needs a bound,
// in front of the very requests that are meant to be refused cheaply.
//
// The count is the instance's own, like Stripe's worker-utilization
// shedder, which runs per worker: capacity is what this process can do at
// once (its CPU, its connections to the database), and a process that
// dies takes its count with it. A fleet-wide count, which every request
// would have to write to a shared store and give back, is the
// concurrent-requests limiter's business (per client), not the
// shedder's.
//
// # Panics
//
// New follows chi's rule: a programming error panics at construction with
// a "shed: " message (a capacity below 1, a reserve outside [0, 1), a
// negative RetryAfter); nothing panics per request.
//
// Options.Observer is told every admission, refusal and release (see
// [Observer]); porch/metrics/prom and porch/metrics/otel implement it.
package shed
