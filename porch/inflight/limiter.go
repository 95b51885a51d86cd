package inflight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// defaultLease is Options.Lease's default: a slot of an instance that dies
// is free for the others within 10 s.
const defaultLease = 10 * time.Second

// minLease is the shortest Options.Lease New accepts: renewed every third
// of it, a shorter lease would be renewed faster than a store's round
// trip under load can be counted on.
const minLease = 100 * time.Millisecond

// Errors the limiter returns.
var (
	// ErrLimited is returned by Acquire when every slot of the key is
	// held; the middleware answers 429.
	ErrLimited = errors.New("inflight: every slot of the key is in use")
	// ErrClosed is returned by Acquire after Close. It is the same value
	// as porch.ErrClosed.
	ErrClosed = porch.ErrClosed
)

// Options configure a Limiter. The zero value keys on the connection's
// peer, in slots leased for 10 s on a shared store.
type Options struct {
	// Name scopes the limiter's slots, so that several limiters can share
	// one store, and names its policy in the RateLimit fields. It is
	// printable ASCII without '"', '\' or ':', as rate.Options.Name. If
	// empty, "inflight".
	Name string
	// TrustProxy keys on the client IP chi's client-IP middleware
	// resolved, as rate.Options.TrustProxy does. If false, the
	// connection's peer address.
	TrustProxy bool
	// KeyFunc, if set, names the principal whose requests are counted
	// together, exempts a request with porch.ErrSkip, or fails it (500),
	// as rate.Options.KeyFunc does. If nil, or when it returns "", the
	// client address.
	KeyFunc porch.KeyFunc
	// Lease is how long a slot in a shared store (PostgreSQL, Redis)
	// outlives its holder's last renewal; the holder renews every third of
	// it. It bounds how long the slots of an instance that died (kill -9,
	// a lost network) stay taken. New refuses it with a store that counts
	// slots in the process (SQLite, memory), where it would mean nothing.
	// If zero, 10 s; New panics below 100 ms.
	Lease time.Duration
	// Observer is told of every request the limiter decides and of every
	// slot given back, with Name. If nil, nothing is observed.
	Observer Observer
	// Logger receives what the limiter logs: a store failure, at most one
	// line of a kind every 10 seconds. If nil, App.Logger for a request
	// an App serves, else slog.Default().
	Logger *slog.Logger
}

// Limiter lets at most its limit of requests of one key be in flight at
// once. It is safe for concurrent use. Create it with [New]; the zero value
// is not usable. Mount it with Handler, or in a porch.Chain.
type Limiter struct {
	slots   slots // in the actors, or in a shared store: chosen once by New
	limit   int64
	opt     Options
	prefix  string // "inflight:<name>:"
	errs    *errlog.Log
	policy  []string // RateLimit-Policy's value
	rlQuote string   // `"<name>";r=`
	warned  sync.Once
	closed  chan struct{}
	once    sync.Once
}

// slots is where a limiter counts: in the pool's actors (local) or in a
// shared store (shared).
type slots interface {
	// acquire takes a slot of key, or fails with ErrLimited (held is
	// then the slots in use) or another error; release gives it back
	// and must be called exactly once after a nil error.
	acquire(ctx context.Context, key string) (release func(), held int64, err error)
	// close stops what the slots run of their own.
	close(ctx context.Context) error
}

// New returns a limiter of limit requests in flight per key, counted by
// pool's actors (SQLite, memory) or in st (PostgreSQL, Redis: see
// store.Slots). On a shared store it starts the goroutine that renews the
// leases of its slots; Close stops it.
//
// New panics, with an "inflight: " message, on a programming error: a nil
// pool or store, limit below 1, an invalid Options.Name, an Options.Lease
// below 100 ms or set for a store that counts slots in the process, or a
// store that says it shares slots (SlotsShared) without implementing
// store.Slots' shared half (driver.SharedSlots).
func New(pool *porch.Pool, st store.Slots, limit int, opt Options) *Limiter {
	if pool == nil {
		panic("inflight: New expects a non-nil pool")
	}
	if st == nil || reflect.ValueOf(st).Kind() == reflect.Pointer && reflect.ValueOf(st).IsNil() {
		panic("inflight: New expects a non-nil store")
	}
	if limit < 1 {
		panic(fmt.Sprintf("inflight: New expects limit >= 1, got %d", limit))
	}
	if opt.Name == "" {
		opt.Name = "inflight"
	}
	if !validName(opt.Name) {
		panic(fmt.Sprintf("inflight: Options.Name %q must be printable ASCII without '\"', '\\' or ':'", opt.Name))
	}
	shared := st.SlotsShared()
	switch {
	case opt.Lease != 0 && !shared:
		panic("inflight: Options.Lease is for a shared store (PostgreSQL, Redis); this store counts slots in the process")
	case opt.Lease == 0:
		opt.Lease = defaultLease
	case opt.Lease < minLease:
		panic(fmt.Sprintf("inflight: Options.Lease must be at least %s, got %s", minLease, opt.Lease))
	}
	l := &Limiter{
		limit:   int64(limit),
		opt:     opt,
		prefix:  "inflight:" + opt.Name + ":",
		errs:    errlog.New(clock.System{}, 0, opt.Logger),
		policy:  []string{fmt.Sprintf("%q;q=%d;qu=\"concurrent-requests\"", opt.Name, limit)},
		rlQuote: fmt.Sprintf("%q;r=", opt.Name),
		closed:  make(chan struct{}),
	}
	if !shared {
		l.slots = newLocal(actor.Of(pool), l.limit)
		return l
	}
	ss, ok := st.(driver.SharedSlots)
	if !ok {
		panic(fmt.Sprintf("inflight: the store %T says it shares slots but does not implement driver.SharedSlots", st))
	}
	l.slots = newShared(ss, l.limit, opt.Lease, l.errs, opt.Name)
	return l
}

// Acquire takes a slot of the principal key, for work outside an HTTP
// handler (a job, a stream), and returns the func that gives it back: call
// it exactly once, when the work is done (later calls do nothing). It
// fails with ErrLimited when every slot of key is in use, porch.ErrSaturated
// when key's actor has a full mailbox, ErrClosed after Close, ctx.Err(), or
// the store's error; then nothing is held. The middleware keys requests
// the same way: Acquire(ctx, "alice") shares slots with requests whose
// KeyFunc returned "alice".
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	rel, _, err := l.acquire(ctx, l.prefix+"p:"+key)
	return rel, err
}

// acquire takes a slot of the full key k; release is idempotent.
func (l *Limiter) acquire(ctx context.Context, k string) (release func(), held int64, err error) {
	select {
	case <-l.closed:
		return nil, 0, ErrClosed
	default:
	}
	rel, held, err := l.slots.acquire(ctx, k)
	if err != nil {
		return nil, held, err
	}
	var once sync.Once
	return func() { once.Do(func() { rel(); l.observe(context.Background(), Released) }) }, held, nil
}

// Close stops renewing the leases of a shared store's slots; a request
// still running keeps its slot until its lease runs out. Call it after the
// server has drained, before the pool and the store close (porch.App runs
// closers in that order when the limiter is registered after them). An
// Acquire after Close fails with ErrClosed. It returns ctx.Err() if ctx
// ends first.
func (l *Limiter) Close(ctx context.Context) error {
	l.once.Do(func() { close(l.closed) })
	return l.slots.close(ctx)
}

// validName reports whether name can go into a slot key and a header as
// it is (see Options.Name).
func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == ':' {
			return false
		}
	}
	return true
}
