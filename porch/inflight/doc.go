// Package inflight limits how many requests of one key (by default, one
// client) may be in flight at once: Stripe's "concurrent requests limiter",
// for endpoints whose cost is time rather than count, and for clients that
// retry a slow call before the first has finished. A request takes a slot
// before its handler runs and gives it back once its response is written,
// also when the handler panics, the client hangs up or a timeout ends it;
// one request over the limit is refused with 429, problem+json,
// Retry-After and the IETF RateLimit fields with the quota unit
// "concurrent-requests":
//
//	RateLimit-Policy: "inflight";q=2;qu="concurrent-requests"
//	RateLimit: "inflight";r=0
//
// Where a key's slots are counted is the store's choice (store.Slots):
//
//   - SQLite and memory: in this process, in the key's actor of the
//     porch.Pool, exactly; a process that dies takes its slots with it.
//     A full mailbox on acquire answers 503 (fail closed); a give-back
//     always reaches the actor.
//   - PostgreSQL and Redis: in the store, across every instance sharing
//     it, exactly: acquires of one key are serialized by the store. Each
//     slot is leased on the store's clock (Options.Lease, 10 s by
//     default) and renewed every third of it, in one statement or
//     pipeline, by one goroutine per limiter for every slot it holds, so
//     that the slots of an instance killed or cut off from the store are
//     free within one lease.
//
// A slot is volatile: it means "running now", so unlike a rate-limit count
// it need not be durable before it is answered. A store that fails an
// acquire fails the request closed (503 with Retry-After), never an
// unchecked pass.
//
// Mount it after the rate limiter and before idempotency keys, so that a
// request the rate limiter refuses never takes a slot, and one this
// limiter refuses never reserves its idempotency key:
//
//	lim, _ := rate.New(pool, st, 100, time.Minute, rate.Options{})
//	conc := inflight.New(pool, st, 4, inflight.Options{})
//	keys := idem.New(pool, st, idem.Options{})
//	r.With(porch.Chain(lim, conc, keys)).Post("/checkout", checkout)
//	r.With(lim.Handler, conc.Handler).Get("/report", report)
//
// See docs/inflight.md for when to use which limiter.
package inflight
