// Package actor is the pool of actor goroutines behind porch.Pool: a job
// sent for a key runs on the actor a hash of the key picks, after every job
// sent earlier for that key. porch/rate and porch/idem keep per-key state on
// these actors, so no read-modify-write runs on a handler goroutine; users
// only make, size and close a porch.Pool.
package actor

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"

	"github.com/writeonce/porch-go/porch/internal/lifecycle"
)

// The sizes porch.NewPool gives a pool whose options leave them zero, as
// porch.PoolOptions documents them. A burst of 1,000 concurrent requests
// for one key lands on one actor, so the mailbox must hold that many jobs.
const (
	DefaultSize    = 16
	DefaultMailbox = 1024
)

// Errors returned by [Pool.Send] and its variants; porch re-exports them.
var (
	// ErrSaturated is returned at once when the key's mailbox is full.
	// Callers fail closed: answer 503 with Retry-After, never proceed
	// uncounted.
	ErrSaturated = errors.New("porch: pool saturated")
	// ErrClosed is returned after [Pool.Close] has begun.
	ErrClosed = lifecycle.ErrClosed
)

// Handle carries a Pool inside a value of another package: porch.Pool
// embeds one, so that porch's own packages reach its actors with [Of],
// while a user, who can import neither this package nor the unexported
// method Of calls, cannot. The framework hands its actors down this way;
// nothing here names it, and nothing is set when it loads.
type Handle struct{ pool *Pool }

// Handle returns p in a Handle, for a type to embed.
func (p *Pool) Handle() Handle { return Handle{p} }

func (h Handle) actors() *Pool { return h.pool }

// Of returns the actors in h: a value that embeds a [Handle], such as a
// non-nil *porch.Pool. Only a Handle has the method Of calls, so the
// compiler refuses any other value.
func Of(h interface{ actors() *Pool }) *Pool { return h.actors() }

// Pool is a fixed set of actor goroutines. A job sent for a key runs on the
// actor chosen by a hash of the key modulo the pool size, after every job sent
// earlier for that key. Each actor runs one job at a time, so state indexed
// by shard (see [Pool.Shard]) is touched by one goroutine only and needs no
// lock.
//
// A Pool is safe for concurrent use. Create it with [New]; the zero value
// is not usable.
type Pool struct {
	seed      maphash.Seed
	mailboxes []chan func(shard int)
	mailbox   int
	rejected  func() // told of each Send refused for saturation; may be nil

	mu     sync.RWMutex // protects closed against Send racing Close
	closed bool

	closing   chan struct{} // closed when Close begins, so a parked SendWait gives up
	closeOnce sync.Once

	wg sync.WaitGroup
}

// New starts size actors, each with a mailbox of mailbox jobs. rejected,
// if not nil, is called for each Send refused with ErrSaturated. Close
// stops them.
func New(size, mailbox int, rejected func()) *Pool {
	p := &Pool{seed: maphash.MakeSeed(), mailboxes: make([]chan func(int), size), mailbox: mailbox,
		closing: make(chan struct{}), rejected: rejected}
	for i := range p.mailboxes {
		mb := make(chan func(int), mailbox)
		p.mailboxes[i] = mb
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for job := range mb {
				job(i)
			}
		}()
	}
	return p
}

// Size reports the number of actors; shard indexes run from 0 to Size()-1.
func (p *Pool) Size() int { return len(p.mailboxes) }

// Mailbox reports the capacity of each actor's mailbox.
func (p *Pool) Mailbox() int { return p.mailbox }

// Shard reports which actor serves key.
func (p *Pool) Shard(key string) int {
	return int(maphash.String(p.seed, key) % uint64(len(p.mailboxes)))
}

// Send queues job on key's actor and returns at once. The job receives the
// shard index. It fails with ErrSaturated when the mailbox is full and with
// ErrClosed once Close has begun; the job then never runs. A refusal for
// saturation is told to the pool's rejected func.
func (p *Pool) Send(key string, job func(shard int)) error {
	err := p.send(p.Shard(key), job, false)
	if err == ErrSaturated && p.rejected != nil {
		p.rejected()
	}
	return err
}

// SendWait is Send that waits for room in the mailbox instead of failing with
// ErrSaturated. It is for reports that must not be lost (an idempotency owner
// handing back its key), never for admitting new work: admission fails fast
// so that overload becomes 503s. It fails with ErrClosed once Close has begun.
func (p *Pool) SendWait(key string, job func(shard int)) error {
	return p.send(p.Shard(key), job, true)
}

// SendShard queues job on a shard's actor, for state kept per shard rather
// than per key (a timer's job, a flush of every shard at Close). Without
// wait it fails fast, as Send does; with wait it waits for room, as SendWait
// does.
func (p *Pool) SendShard(shard int, wait bool, job func(shard int)) error {
	return p.send(shard, job, wait)
}

// send queues job on shard's mailbox under the read lock that keeps Close
// from closing it meanwhile. When the mailbox is full it fails with
// ErrSaturated, or, if wait, waits for room until Close begins.
func (p *Pool) send(shard int, job func(shard int), wait bool) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	mb := p.mailboxes[shard]
	if !wait {
		select {
		case mb <- job:
			return nil
		default:
			return ErrSaturated
		}
	}
	select {
	case mb <- job:
		return nil
	case <-p.closing:
		return ErrClosed
	}
}

// Close stops accepting jobs, lets every actor finish the jobs already in its
// mailbox, and waits for the actors to exit or for ctx to end, returning
// ctx.Err() in that case.
func (p *Pool) Close(ctx context.Context) error {
	p.closeOnce.Do(func() { close(p.closing) })
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, mb := range p.mailboxes {
			close(mb)
		}
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reply carries an actor's answer back to the caller that sent it the job:
// the caller makes one with [NewReply], sends a job that answers it, and
// waits. An actor may keep a Reply and answer it later, from any goroutine
// (a committer after its transaction, or an owner's report). Send must be
// called exactly once; it never blocks, even when the caller has stopped
// waiting.
type Reply[T any] struct{ ch chan result[T] }

type result[T any] struct {
	v   T
	err error
}

// NewReply makes a reply for a caller that waits with [Reply.Wait].
func NewReply[T any]() Reply[T] { return Reply[T]{ch: make(chan result[T], 1)} }

// Send delivers the answer.
func (r Reply[T]) Send(v T, err error) { r.ch <- result[T]{v, err} }

// Wait blocks until the answer arrives or ctx ends, returning ctx.Err().
func (r Reply[T]) Wait(ctx context.Context) (T, error) {
	select {
	case res := <-r.ch:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
