// Package idem is porch's idempotency-key middleware: a request carrying an
// Idempotency-Key runs its handler exactly once, even when retries of it
// arrive concurrently, and every retry gets the first execution's response.
//
// A key's flight is shaped like golang.org/x/sync/singleflight's: the key's
// pool actor lets one request lead and parks its duplicates, and the leader
// ends the flight with one result they all act on. One of four outcomes:
//
//   - a stored response whose request digest matches: replay it (same status,
//     byte-identical body, Content-Type and the headers Options.KeepHeaders
//     names, Idempotency-Replayed: true);
//   - a stored response whose digest differs: 422, nothing runs;
//   - no record and no owner: this request owns the key and runs the handler;
//     its response is stored (group commit) before it is sent;
//   - an owner is running: park until it reports, then answer as a replay
//     would. No 409 and no polling, unless Options.MaxWait runs out: then
//     422 if the owner runs a different request (the key was reused), and
//     409 otherwise. An owner on another instance is waited for at most
//     the shared store's bound (postgres.Options.Timeout), then 409.
//
// Ownership is volatile: a crash mid-handler leaves no owner, so the next
// duplicate runs the handler again, and a key is never wedged pending. A 5xx
// (or a status Options.StoreStatus refuses) or a panic is not stored, nor
// are its Exec writes; ownership passes to a parked duplicate. A support
// tool sees a key's state with [Keys.Lookup] and clears a stored answer
// with [Keys.Forget].
//
// A handler makes its side effect exactly-once by writing it with [Exec]:
// the write commits in the transaction that stores the response, so a
// crash, a failed save or a lost database session leaves both or neither,
// and the retry either replays or runs on a clean slate. For calls to other
// services, pass [OperationID] downstream as their idempotency key.
//
//	keys := idem.New(pool, st, idem.Options{RequireKey: true})
//	r.With(porch.Chain(limiter, keys)).Post("/checkout", checkout)
//
// The digest that tells a retry from a reused key is byte-exact by default
// (a 422 for a JSON body of at most 4 KiB re-encoded on a retry says so,
// and names the option; the hint costs every keyed request, so larger
// bodies go without it); Options.Fingerprint with [FingerprintJSON] compares
// JSON bodies by their canonical form instead, so a client that re-encodes
// its JSON on a retry is not refused.
//
// [Keys.Handler] is the same middleware for chi alone: r.With(keys.Handler).
// [New] does no I/O: it panics on a programming error, as chi's constructors
// do, and returns no error.
//
// # Whose key is it
//
// A key is looked up within a scope: the principal Options.Principal
// returns (set it to the authenticated account), or, when it is nil or
// returns "", the client's address as the rate limiter keys it by default
// (the peer IP, an IPv6 client by its /64; Options.TrustProxy for the
// address chi's client-IP middleware resolved behind your proxy). Keys are
// never global by default: in one global key space a response stored for
// one client, a 401 say, would be replayed to another client that sent the
// same key. Without a principal, a client whose address changes between retries
// (a phone moving networks) runs the handler again; set Principal where
// that matters. Never put chi's middleware.RealIP in front: it rewrites the
// address from headers any client can forge, so a client could pick
// another's scope (the middleware logs a warning once when it sees that).
//
// Put it last in a chain, after any middleware that may refuse (a rate
// limiter): a refusal then never reserves the key. Placed earlier it is still
// correct (a refusal by a later middleware is not stored), but a refused
// request briefly holds the key.
//
// Options.Observer is told each keyed request's [Outcome]; a metrics adapter
// (porch/metrics/prom) implements [Observer].
//
// # Problem types
//
// The middleware's own answers are application/problem+json (RFC 9457),
// with a type clients may switch on, under "https://porch.dev/problems/"
// or Options.ProblemBase:
//
//   - idempotency-key-required: 400, Options.RequireKey and no key sent.
//   - idempotency-key-invalid: 400, a key that is empty, longer than 255
//     bytes or not printable ASCII.
//   - idempotency-key-reused: 422, the key was used for another request.
//   - idempotency-in-flight: 409, the key's first request is still running.
//   - idempotency-body-too-large: 413, a body over Options.MaxBody (or an
//     http.MaxBytesReader's limit).
//   - idempotency-body-timeout: 408, the body did not arrive within the
//     server's ReadTimeout.
//   - idempotency-body-unreadable: 400, the body could not be read (the
//     client closed the connection or sent less than its Content-Length).
//   - idempotency-body-invalid: 400, Options.Fingerprint refused the body.
//   - idempotency-principal-failed: 500, Options.Principal failed.
//   - idempotency-unavailable: 503, the key could not be decided or its
//     response stored; the handler's writes were not kept.
//   - idempotency-write-failed: 500, one of the handler's own writes
//     failed, so nothing it did was kept.
//   - idempotency-response-too-large: 500, the handler's answer was over
//     Options.MaxStoredBody, so it was withheld and its writes discarded.
package idem
