// Package kit is porch's shortest start: one value that owns a pool and a
// store, hands out limiters and idempotency middlewares built on them, and
// closes everything in the one order that loses nothing.
//
//	k := kit.Must(kit.Open(sqlite.Open("app.db", sqlite.Options{})))
//	r.Use(k.Limit(100, time.Minute))
//	r.With(k.Idempotency(idem.Options{RequireKey: true}).Handler).Post("/checkout", checkout)
//	r.With(k.InFlight(4, inflight.Options{}).Handler).Get("/report", report)
//	// … serve r; once the server has drained:
//	k.Close(ctx)
//
// Whole programs that stop cleanly, with porch.App or net/http, are in the
// repository's examples directory.
//
// The parts stay available for what kit does not cover: k.Pool() and the
// store you opened are the ones rate.New and idem.New take, and New builds
// a Kit on a pool and stores of your own (counters on Redis, idempotency
// keys on PostgreSQL).
//
// Close is the order porch needs: the limiters first (they write their
// exact counts through the pool's actors), then the pool (its last jobs
// write to the store), then the store or stores (they flush what was
// written). Closing them by hand in another order loses counts or fails.
package kit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// Kit is a pool and its stores, with the limiters and idempotency
// middlewares built on them. Create it with Open or New; it is safe for
// concurrent use.
type Kit struct {
	pool     *porch.Pool
	counters store.Counters // the limiters' store; nil: Limiter fails
	keys     store.Keys     // the idempotency keys' store; nil: Idempotency panics

	mu           sync.Mutex
	limiters     []*rate.Limiter
	inflights    []*inflight.Limiter
	limits       int  // Limit calls, which name their limiters
	named        bool // a limiter named "default" was made
	limitDefault bool // the one named "default" is Limit's
	closed       bool
}

// defaultName is the name of a limiter without Options.Name, which the
// first Limit takes too.
const defaultName = "default"

// ErrNoStore is returned by Limiter (and panicked with by Limit and
// Idempotency) when a Kit has no store for what is asked of it: counters
// for a limiter, keys for idempotency.
var ErrNoStore = errors.New("kit: no store for this middleware")

// Open returns a Kit on st, which holds both the limiters' counters and
// the idempotency keys (the SQLite, PostgreSQL and memory stores do),
// with a pool of porch's default size. It takes a driver's Open results
// as they come, so that kit.Open(sqlite.Open(path, opt)) is one call: a
// non-nil err is returned as it is. A store without idempotency keys
// (Redis) does not compile here; give it to New.
func Open[S interface {
	store.Counters
	store.Keys
}](st S, err error) (*Kit, error) {
	if err != nil {
		return nil, err
	}
	return New(porch.NewPool(porch.PoolOptions{}), st, st), nil
}

// Must returns k, or panics with err: for a program's setup, as
// template.Must is.
func Must(k *Kit, err error) *Kit {
	if err != nil {
		panic(fmt.Sprintf("kit: %v", err))
	}
	return k
}

// New returns a Kit on pool, with counters for its limiters and keys for
// its idempotency middlewares (one store may be both, and either may be
// nil if unused). The Kit closes pool and the stores in Close; a store
// given as both is closed once.
func New(pool *porch.Pool, counters store.Counters, keys store.Keys) *Kit {
	if pool == nil {
		panic("kit: New expects a non-nil pool")
	}
	return &Kit{pool: pool, counters: counters, keys: keys}
}

// Pool is the Kit's pool, for rate.New and idem.New of your own.
func (k *Kit) Pool() *porch.Pool { return k.pool }

// Limiter returns a limiter of limit requests per window (see rate.New)
// on the Kit's counters. Close closes it first. Like rate.New, it returns
// an error for what the store answers (a policy conflict, a store that
// fails) and panics on a programming error found before any I/O: a limit
// out of range, or an option the Kit's store would ignore (Lease on
// SQLite, WriteAhead on PostgreSQL).
//
// After Limit has named a limiter "default", a Limiter without
// Options.Name (whose name that is) or named "default" is refused with
// store.ErrPolicyConflict, on every store: on SQLite and the memory store
// the two would overwrite each other's counts, and on a shared store they
// would count one client's requests to both routes together. Give it a
// Name of its own.
func (k *Kit) Limiter(limit int, window time.Duration, opt rate.Options) (*rate.Limiter, error) {
	return k.limiter(limit, window, opt, false)
}

// limiter is Limiter, for Limit when byLimit.
func (k *Kit) limiter(limit int, window time.Duration, opt rate.Options, byLimit bool) (*rate.Limiter, error) {
	if k.counters == nil {
		return nil, fmt.Errorf("%w: a limiter needs counters", ErrNoStore)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, porch.ErrClosed
	}
	isDefault := opt.Name == "" || opt.Name == defaultName
	if isDefault && k.limitDefault {
		return nil, fmt.Errorf("kit: Limiter: %w: k.Limit's first limiter took %q, the name of a limiter without one of its own; name this limiter with rate.Options.Name",
			store.ErrPolicyConflict, defaultName)
	}
	l, err := rate.New(k.pool, k.counters, limit, window, opt)
	if err != nil {
		return nil, err
	}
	k.limiters = append(k.limiters, l)
	if isDefault {
		k.named = true
		k.limitDefault = byLimit
	}
	return l, nil
}

// Limit is Limiter with the default options, as chi middleware: limit
// requests per window per client address. Each Limit is a limiter of its
// own, named in the order they are made (its counts and its
// RateLimit-Policy go by that name): the first "default", the name of a
// limiter without Options.Name, unless the Kit has made one of that name
// already, then "limit2", "limit3", …, so that two routes each get their
// limit. Make them in the same order across restarts, or use Limiter with
// Options.Name. A Limiter made after a Limit named "default" needs a
// Name of its own (see Limiter). It panics if the limiter cannot be built (a
// policy conflict, a store failing at start): it is for a program's
// setup, where that is fatal anyway. Use Limiter to handle the error, or
// to pass options.
func (k *Kit) Limit(limit int, window time.Duration) func(http.Handler) http.Handler {
	k.mu.Lock()
	k.limits++
	name := fmt.Sprintf("limit%d", k.limits)
	if k.limits == 1 && !k.named {
		name = defaultName
	}
	k.mu.Unlock()
	l, err := k.limiter(limit, window, rate.Options{Name: name}, true)
	if err != nil {
		panic(fmt.Sprintf("%v (Limit(%d, %s))", err, limit, window))
	}
	return l.Handler
}

// Idempotency returns the idempotency-key middleware on the Kit's keys
// (see idem.New). Like idem.New it does no I/O and returns no error: on a
// Kit without keys, or after Close, it panics with an error wrapping
// ErrNoStore or porch.ErrClosed, both mistakes in a program's setup.
func (k *Kit) Idempotency(opt idem.Options) *idem.Keys {
	if k.keys == nil {
		panic(fmt.Errorf("%w: idempotency needs a store of keys (SQLite, PostgreSQL or memory)", ErrNoStore))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		panic(fmt.Errorf("kit: Idempotency: %w", porch.ErrClosed))
	}
	return idem.New(k.pool, k.keys, opt)
}

// InFlight returns an in-flight limiter of limit requests per key at
// once (see inflight.New) on the slots of the Kit's counters' store, or
// of its keys' store without counters. Close closes it with the rate
// limiters. Like inflight.New it does no I/O and returns no error: on a
// Kit whose store keeps no slots, or after Close, it panics with an error
// wrapping ErrNoStore or porch.ErrClosed, both mistakes in a program's
// setup.
func (k *Kit) InFlight(limit int, opt inflight.Options) *inflight.Limiter {
	var st any = k.counters
	if k.counters == nil {
		st = k.keys
	}
	slots, ok := st.(store.Slots)
	if !ok {
		panic(fmt.Errorf("%w: an in-flight limiter needs a store of slots (SQLite, PostgreSQL, Redis or memory)", ErrNoStore))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		panic(fmt.Errorf("kit: InFlight: %w", porch.ErrClosed))
	}
	l := inflight.New(k.pool, slots, limit, opt)
	k.inflights = append(k.inflights, l)
	return l
}

// Close closes, in order, every limiter the Kit handed out (so that they
// write their exact counts), the pool (whose last jobs write to the
// store), and the stores (which flush what was written). Call it after
// the server has stopped serving. Each step gets what is left of ctx; it
// returns every step's error, joined, and the later steps run even when
// an earlier one fails, so that nothing is left open. A second Close
// returns porch.ErrClosed.
func (k *Kit) Close(ctx context.Context) error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return porch.ErrClosed
	}
	k.closed = true
	limiters, inflights := k.limiters, k.inflights
	k.mu.Unlock()
	var errs []error
	for _, l := range inflights {
		if err := l.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kit: close in-flight limiter: %w", err))
		}
	}
	for _, l := range limiters {
		if err := l.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kit: close limiter: %w", err))
		}
	}
	if err := k.pool.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("kit: close pool: %w", err))
	}
	closedCounters := false
	if k.counters != nil {
		closedCounters = true
		if err := k.counters.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kit: close store: %w", err))
		}
	}
	if k.keys != nil && !(closedCounters && sameStore(k.keys, k.counters)) {
		if err := k.keys.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kit: close store: %w", err))
		}
	}
	return errors.Join(errs...)
}

// sameStore reports whether the two interfaces hold one store. Values of
// a type that cannot be compared (a store of the caller's, not a pointer)
// are two stores.
func sameStore(a store.Keys, b store.Counters) bool {
	if !reflect.TypeOf(a).Comparable() || !reflect.TypeOf(b).Comparable() {
		return false
	}
	return any(a) == any(b)
}
