package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// op is one queued write. Exactly one of its payload fields is set; a hit
// answers through its own callback, every other write through done.
type op struct {
	counter  *Counter
	response *Response
	// owner is the statements an idempotency owner ran through
	// Reservation.Exec; they commit with response, in one savepoint.
	owner  []execOp
	delete *deletion
	hit    *hitOp
	exec   *execOp
	// probe is Health's write: a row inserted and deleted again, so that
	// the transaction must really write (see probeKey).
	probe bool
	done  func(error)
	// failed is this write's own error, set by the batch writer when the
	// write failed alone and the rest of its batch committed.
	failed error
	// dropped is set by a batch writer that left this write out of the
	// batch (its statement aborted the whole transaction); failed says why.
	dropped bool
}

// execOp is an application's statement run in the committer's transaction.
type execOp struct {
	query string
	args  []any
}

// hitOp is one request counted in a shared counter. The batch writer fills
// result before the callbacks run.
type hitOp struct {
	key    string
	window time.Duration
	done   func(Hit, error)
	result Hit
}

type deletion struct {
	key string
	now int64 // Unix ms on the timeline
}

// batchWriter applies one batch of writes in one transaction.
type batchWriter interface {
	writeBatch(batch []op) error
}

// committer is the group-commit loop shared by the backends: one goroutine
// takes the first queued write, drains whatever else is already queued, and
// makes the whole batch durable in one transaction before answering any of
// its writers.
type committer struct {
	queue    chan op
	maxBatch int
	writer   batchWriter
	clock    clock.Clock // its monotonic reading dates each batch's outcome

	health       health
	healthBudget time.Duration // HealthBudget; a test may shorten it

	mu     sync.RWMutex // protects closed against enqueue racing close
	closed bool
	done   chan struct{}

	commits, writes, failed atomic.Int64
}

func newCommitter(w batchWriter, clock clock.Clock, queueSize, maxBatch int) *committer {
	c := &committer{queue: make(chan op, queueSize), maxBatch: maxBatch, writer: w, clock: clock,
		healthBudget: HealthBudget, done: make(chan struct{})}
	go c.run()
	return c
}

// enqueue queues o, blocking while the queue is full: that back-pressure is
// what turns a slow disk into full mailboxes and 503s.
func (c *committer) enqueue(o op) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.queue <- o
	return nil
}

// tryEnqueue queues o unless the queue is full, and reports whether it did.
func (c *committer) tryEnqueue(o op) (bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false, ErrClosed
	}
	select {
	case c.queue <- o:
		return true, nil
	default:
		return false, nil
	}
}

func (c *committer) run() {
	defer close(c.done)
	batch := make([]op, 0, c.maxBatch)
	for first := range c.queue {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < c.maxBatch {
			select {
			case o, ok := <-c.queue:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		err := c.writer.writeBatch(batch)
		c.health.record(err, c.clock.Monotonic())
		if err != nil {
			c.failed.Add(1)
		} else {
			c.commits.Add(1)
			c.writes.Add(int64(len(batch)))
		}
		for i := range batch {
			opErr := err
			if opErr == nil {
				opErr = batch[i].failed
			}
			switch o := batch[i]; {
			case o.hit != nil:
				o.hit.done(o.hit.result, opErr)
			case o.done != nil:
				o.done(opErr)
			}
			batch[i] = op{} // let the payloads go
		}
	}
}

// close stops accepting writes, commits what is queued and waits for it.
func (c *committer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.queue)
	}
	c.mu.Unlock()
	<-c.done
}

// closeCtx is close under ctx: it returns ctx.Err() if ctx ends first and
// leaves the flush running.
func (c *committer) closeCtx(ctx context.Context) error {
	flushed := make(chan struct{})
	go func() { c.close(); close(flushed) }()
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// do queues o and waits until its transaction has committed, returning its
// error, or until ctx ends, returning ctx.Err(): the write may then still
// commit. Pass context.WithoutCancel to always learn the outcome; the
// committer always answers, within a batch.
func (c *committer) do(ctx context.Context, o op) error {
	done := make(chan error, 1)
	o.done = func(err error) { done <- err }
	if err := c.enqueue(o); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *committer) stats() Stats {
	return Stats{Commits: c.commits.Load(), Writes: c.writes.Load(), Failed: c.failed.Load()}
}
