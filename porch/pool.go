package porch

import (
	"context"

	"github.com/writeonce/porch-go/porch/internal/actor"
)

// Errors a middleware built on a [Pool] fails closed with.
var (
	// ErrSaturated means the actor a request's key hashes to had a full
	// mailbox: the middleware answered 503 with Retry-After rather than
	// proceed uncounted.
	ErrSaturated = actor.ErrSaturated
	// ErrClosed is returned after [Pool.Close] has begun. It is the same
	// value as store.ErrClosed, so one errors.Is catches a request refused
	// by either.
	ErrClosed = actor.ErrClosed
)

// PoolOptions are the pool's capacity knobs.
type PoolOptions struct {
	// Size is the number of actors. More actors buy concurrency across keys;
	// one key is always served by one actor. If zero, 16.
	Size int
	// Mailbox is how many requests each actor holds queued before the
	// middlewares answer 503 (ErrSaturated). A burst of concurrent requests
	// for one key lands on one actor, so it bounds the burst one key may
	// send at once. If zero, 1024.
	Mailbox int
	// Observer is told of every request refused with ErrSaturated. If
	// nil, nothing is observed.
	Observer PoolObserver
}

// Pool is a fixed set of actor goroutines shared by porch's middlewares
// (rate.New and idem.New take one). Every request for one key is decided by
// the actor a hash of the key picks, one at a time, so per-key state needs
// no lock and no read-modify-write runs on a handler goroutine.
//
// A Pool is safe for concurrent use. Create it with [NewPool]; the zero value
// is not usable. Close it after the middlewares built on it.
type Pool struct{ actors }

// actors are the pool's actor goroutines, embedded so that porch/rate and
// porch/idem reach them with actor.Of; its one method is actor's own, so a
// user sees neither the field nor the method.
type actors = actor.Handle

// NewPool starts the pool's actors. Close stops them.
func NewPool(opt PoolOptions) *Pool {
	if opt.Size < 0 || opt.Mailbox < 0 {
		panic("porch: NewPool expects Size >= 0 and Mailbox >= 0")
	}
	if opt.Size == 0 {
		opt.Size = actor.DefaultSize
	}
	if opt.Mailbox == 0 {
		opt.Mailbox = actor.DefaultMailbox
	}
	var rejected func()
	if opt.Observer != nil {
		rejected = opt.Observer.PoolRejected
	}
	return &Pool{actor.New(opt.Size, opt.Mailbox, rejected).Handle()}
}

// Size reports the number of actors.
func (p *Pool) Size() int { return actor.Of(p).Size() }

// Close stops accepting work, lets every actor finish what is already in
// its mailbox, and waits for the actors to exit or for ctx to end,
// returning ctx.Err() in that case.
func (p *Pool) Close(ctx context.Context) error { return actor.Of(p).Close(ctx) }
