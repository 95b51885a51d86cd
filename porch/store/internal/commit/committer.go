// Package commit is the group-commit loop every store driver runs: one
// goroutine drains every queued write into one batch (a transaction; on
// Redis, a pipeline), which the driver's [Writer] applies, and answers each
// write only after that batch has committed. It also remembers the last
// batch's outcome, which is what Store.Health reports.
//
// It lives under store/internal so that the drivers can use it and the
// interfaces package (porch/store) imports none of them.
package commit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Op is one queued write. Exactly one of its payload fields is set; a hit
// answers through its own callback, every other write through Done.
type Op struct {
	Counter  *driver.Counter
	Response *driver.Response
	// Owner is the statements an idempotency owner ran through
	// Reservation.Exec; they commit with Response, or neither does.
	Owner  []Statement
	Delete *Deletion
	Hit    *Hit
	// Peek reads a shared counter without counting it, and answers
	// through its Done as a hit does; N and Limit are unused.
	Peek *Hit
	// Reset clears a shared counter's window.
	Reset *Reset
	// TakeBack gives back hits of a request that was refused after all
	// (see driver.SharedCounters.TakeBack); it answers through Done.
	TakeBack *TakeBack
	Exec     *Statement
	// Probe is Health's write: a row inserted and deleted again, so that
	// the transaction must really write (see ProbeSQL).
	Probe bool
	Done  func(error)
	// Failed is this write's own error, set by the batch writer when the
	// write failed alone and the rest of its batch committed.
	Failed error
	// Dropped is set by a batch writer that left this write out of the
	// batch (its statement aborted the whole transaction); Failed says why.
	Dropped bool
	// Deferred is set by a batch writer that left this write for the next
	// batch without running it: the batch's time for applications'
	// statements (sqlite.Options.ExecBudget) ran out on the ones before
	// it. It is not answered with this batch; the committer carries it
	// into the next one, first, so that it runs before anything queued
	// after it.
	Deferred bool
	// Settled is set by a batch writer that committed (or failed) this
	// write in a transaction of its own: Failed, nil or not, is its
	// outcome whatever becomes of the rest of the batch. Without it, a
	// reset that had committed would be reported failed with the batch's
	// hits, and its caller would retry it over hits counted since.
	Settled bool
}

// Statement is an application's statement run in the committer's
// transaction.
type Statement struct {
	Query string
	Args  []any
}

// Hit is one request counted in a shared counter. The batch writer fills
// Result before the callbacks run.
type Hit struct {
	Key  string
	Rule driver.Rule // the limiter's algorithm and policy
	N    int64       // the request's weight, at least 1
	// Held, Settled, Adopted and LeaseStart (Unix ms) are the hit's
	// lease (see driver.SharedCounters.AddHit); zero without one.
	Held, Settled, Adopted, LeaseStart int64
	Done                               func(driver.Hit, error)
	// Result is the hit's outcome (see driver.SharedCounters.AddHit).
	Result driver.Hit
}

// Reset is the clearing of one shared counter: its key's next hit opens a
// new window.
type Reset struct{ Key string }

// TakeBack is n hits to remove from key's count, if its window is still
// the one that opened at WindowStart (Unix ms on the database's clock).
type TakeBack struct {
	Key         string
	WindowStart int64
	N           int64
	// Lease marks a lease's give-back (driver.SharedCounters.GiveBack): N
	// held hits and Settled answered ones, counted in WindowStart's epoch
	// or one a reset has replaced since.
	Lease   bool
	Settled int64
}

// Deletion is the prune of one key's expired response.
type Deletion struct {
	Key string
	Now int64 // Unix ms on the timeline
}

// Writer applies one batch of writes in one transaction: a driver's method
// value, so that the driver's type need not export it.
type Writer func(batch []Op) error

// Committer is the group-commit loop shared by the drivers: one goroutine
// takes the first queued write, drains whatever else is already queued, and
// makes the whole batch durable in one transaction before answering any of
// its writers. It is safe for concurrent use; Close stops its goroutine.
type Committer struct {
	queue    chan Op
	maxBatch int
	writer   Writer
	clock    clock.Clock    // its monotonic reading dates each batch's outcome
	observer store.Observer // told of each batch; may be nil

	health       health
	healthBudget time.Duration // HealthBudget; a test may shorten it

	// gather is how long a batch may wait for more writes (see
	// NewGathering); 0 never waits. Only the committer goroutine touches
	// peak and timer.
	gather time.Duration
	peak   int // the recent batches' largest size, less one a batch since
	timer  *time.Timer
	// gathering, if set (by a test, before the first Enqueue), is called
	// when a batch starts to wait for more writes.
	gathering func()

	mu     sync.RWMutex // protects closed against Enqueue racing close
	closed bool
	done   chan struct{}

	commits, writes, failed atomic.Int64
	observerPanics          atomic.Int64
}

// New starts a committer that hands batches of at most maxBatch writes to w
// and queues at most queueSize writes meanwhile, and tells obs (if not nil)
// of each batch.
func New(w Writer, clk clock.Clock, queueSize, maxBatch int, obs store.Observer) *Committer {
	return NewGathering(w, clk, queueSize, maxBatch, obs, 0)
}

// NewGathering is New with a bounded group-commit wait, as PostgreSQL's
// commit_delay with commit_siblings. While writes are arriving together
// (a recent batch had at least GatherSiblings of them), a batch that has
// drained fewer than the recent peak waits up to gather for the rest
// before it commits, so that a commit's own cost (its BEGIN, its WAL
// frames and fsync) is shared by more writes: a request answered by one
// batch is back in the queue a moment later, and without the wait it
// starts a batch of its own. The peak drops by one a batch, so a burst
// that has passed stops costing waits within as many batches as it was
// large. A write that comes alone (every recent batch below
// GatherSiblings) never waits, and a wait ends the moment the batch
// reaches the peak, the queue closes, or gather has passed: a batch is
// held at most gather longer than it would have been, and nothing about
// what it commits or how its writers are answered changes.
func NewGathering(w Writer, clk clock.Clock, queueSize, maxBatch int, obs store.Observer, gather time.Duration) *Committer {
	c := &Committer{queue: make(chan Op, queueSize), maxBatch: maxBatch, writer: w, clock: clk,
		observer: obs, healthBudget: HealthBudget, done: make(chan struct{}), gather: gather}
	go c.run()
	return c
}

// GatherSiblings is the size a recent batch must have reached for a batch
// to wait for more writes (see NewGathering): below it, writes come too
// few at a time for a wait to gather any, and one, two or three clients
// must not wait on each other.
const GatherSiblings = 4

// Enqueue queues o, blocking while the queue is full: that back-pressure is
// what turns a slow disk into full mailboxes and 503s. After Close it fails
// with store.ErrClosed.
func (c *Committer) Enqueue(o Op) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return store.ErrClosed
	}
	c.queue <- o
	return nil
}

// tryEnqueue queues o unless the queue is full, and reports whether it did.
func (c *Committer) tryEnqueue(o Op) (bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false, store.ErrClosed
	}
	select {
	case c.queue <- o:
		return true, nil
	default:
		return false, nil
	}
}

func (c *Committer) run() {
	defer close(c.done)
	batch := make([]Op, 0, c.maxBatch)
	var carry []Op // deferred by the last batch: they lead the next
	for {
		batch = append(batch[:0], carry...)
		carry = carry[:0]
		if len(batch) == 0 {
			first, ok := <-c.queue
			if !ok {
				return
			}
			batch = append(batch, first)
		}
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
		batch = c.gatherMore(batch)
		c.peak = max(len(batch), c.peak-1)
		err := c.write(batch)
		c.health.record(err, c.clock.Monotonic())
		if err != nil {
			c.failed.Add(1)
		} else {
			c.commits.Add(1)
			written := 0
			for i := range batch {
				if !batch[i].Deferred {
					written++
				}
			}
			c.writes.Add(int64(written))
		}
		for i := range batch {
			if batch[i].Deferred {
				o := batch[i]
				o.Deferred, o.Failed, o.Settled, o.Dropped = false, nil, false, false
				carry = append(carry, o)
				batch[i] = Op{}
				continue
			}
			opErr := err
			if opErr == nil || batch[i].Settled {
				opErr = batch[i].Failed
			}
			switch o := batch[i]; {
			case o.Hit != nil:
				o.Hit.Done(o.Hit.Result, opErr)
			case o.Peek != nil:
				o.Peek.Done(o.Peek.Result, opErr)
			case o.Done != nil:
				o.Done(opErr)
			}
			batch[i] = Op{} // let the payloads go
		}
	}
}

// gatherMore waits, for at most c.gather, until batch is as large as the
// recent peak, if that was at least GatherSiblings writes (see
// NewGathering). The queue's channel says when a write arrives, and the
// timer's when the wait is over: no polling.
func (c *Committer) gatherMore(batch []Op) []Op {
	target := min(c.peak, c.maxBatch)
	if c.gather <= 0 || c.peak < GatherSiblings || len(batch) >= target {
		return batch
	}
	if c.timer == nil {
		c.timer = time.NewTimer(c.gather)
	} else {
		c.timer.Reset(c.gather)
	}
	defer c.timer.Stop()
	if c.gathering != nil {
		c.gathering()
	}
	for len(batch) < target {
		select {
		case o, ok := <-c.queue:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		case <-c.timer.C:
			return batch
		}
	}
	return batch
}

// write hands batch to the writer, and tells the observer how it went.
func (c *Committer) write(batch []Op) error {
	if c.observer == nil {
		return c.writer(batch)
	}
	start := c.clock.Monotonic()
	err := c.writer(batch)
	c.observe(store.Batch{Writes: len(batch), Took: c.clock.Monotonic() - start, Err: err})
	return err
}

// observe tells the observer of b. A panicking observer is a broken metrics
// adapter, not a reason to stop committing: on this goroutine a panic would
// kill the process, and with it every write in flight. The first panic is
// logged; the batch's writers are answered as if nothing happened.
func (c *Committer) observe(b store.Batch) {
	defer func() {
		if p := recover(); p != nil && c.observerPanics.Add(1) == 1 {
			slog.Error("store: the Observer panicked in CommitBatch; later panics are not logged", "panic", p)
		}
	}()
	c.observer.CommitBatch(b)
}

// close stops accepting writes, commits what is queued and waits for it.
func (c *Committer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.queue)
	}
	c.mu.Unlock()
	<-c.done
}

// Close stops accepting writes and commits what is queued. It returns
// ctx.Err() if ctx ends first and leaves the flush running.
func (c *Committer) Close(ctx context.Context) error {
	flushed := make(chan struct{})
	go func() { c.close(); close(flushed) }()
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Do queues o and waits until its transaction has committed, returning its
// error, or until ctx ends, returning ctx.Err(): the write may then still
// commit. Pass context.WithoutCancel to always learn the outcome; the
// committer always answers, within a batch.
func (c *Committer) Do(ctx context.Context, o Op) error {
	w := waiters.Get().(*waiter)
	o.Done = w.done
	if err := c.Enqueue(o); err != nil {
		waiters.Put(w) // never queued: nothing will answer it
		return err
	}
	select {
	case err := <-w.ch:
		waiters.Put(w)
		return err
	case <-ctx.Done():
		return ctx.Err() // w is left to the committer's answer, never reused
	}
}

// waiter is how Do waits for its write's answer: a channel and the Done
// that answers it, made together once and reused, since every stored
// response and Exec waits so and the two cost it two allocations. A
// waiter goes back to the pool only once its answer has been received (or
// its write was never queued), so that no late answer lands on a reuse.
type waiter struct {
	ch   chan error
	done func(error)
}

var waiters = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan error, 1)}
	w.done = func(err error) { w.ch <- err }
	return w
}}

// Stats reports the committer's counters since it started.
func (c *Committer) Stats() store.Stats {
	return store.Stats{Commits: c.commits.Load(), Writes: c.writes.Load(), Failed: c.failed.Load()}
}
