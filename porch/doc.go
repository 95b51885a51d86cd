// Package porch is a small framework on chi whose middlewares keep their
// state in a real database.
//
// Three pieces live here:
//
//   - [Middleware], a before/after hook pair run around a buffered handler by
//     [Chain]. A before hook may short-circuit with a [Response]; the after
//     hook of every middleware whose before ran sees the final response, in
//     reverse order, even when the handler panicked.
//   - [Pool], a fixed set of actor goroutines chosen by a hash of a key. The
//     same key always reaches the same actor, so per-key state needs no lock
//     and no read-modify-write ever runs on a handler goroutine.
//   - [App], a chi router that serves with bounded connections (timeouts,
//     header size, a cap on open connections) and stops in bounded steps:
//     a drain, then the closers of what the middlewares opened, in order,
//     each with its own budget, so that state is flushed however the drain
//     went.
//
// Every porch middleware mounts as a plain func(http.Handler) http.Handler,
// its Handler method, so it can be copied into any chi application; [Chain]
// runs several around one buffered response:
//
//	r := chi.NewRouter()
//	r.Use(limiter.Handler)
//	r.With(porch.Chain(limiter, keys)).Post("/checkout", checkout)
package porch
