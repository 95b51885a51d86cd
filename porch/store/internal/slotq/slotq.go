// Package slotq queues the in-flight limiter's slot calls (acquires,
// releases) for the stores whose slots live on a server (PostgreSQL,
// Redis), so that concurrent requests' slot calls share round trips: a
// call joins the queue, and a bounded number of senders each take the
// calls queued so far and send them in one pipeline. A call alone is
// sent at once; under load, a round trip carries many, where one each
// would cost every request two round trips more. What a pipeline holds,
// how it is sent and what each call's outcome is stay the driver's
// (Queue.Send); the queue only gathers calls, bounds the sends and waits
// for the outcomes.
package slotq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Queue gathers calls whose payload is T and sends them, up to Max at a
// time, in at most Senders sends at once. Set its fields before the first
// Do and leave them; it is safe for concurrent use.
type Queue[T any] struct {
	// Send sends calls in one pipeline and settles each (Call.Settle),
	// each as soon as its outcome is known. It bounds its own round trip
	// (a caller gives up after Timeout, but Send's goroutine does not
	// stop), and it is called from at most Senders goroutines at once.
	Send func(calls []*Call[T])
	// Senders bounds the sends in flight at once; 0 means 1.
	Senders int
	// Max bounds the calls one send carries; 0 means no bound.
	Max int
	// Timeout bounds a caller's wait for its call's outcome; 0 means no
	// bound but the caller's context.
	Timeout time.Duration

	mu      sync.Mutex
	queue   []*Call[T] // the calls no send has taken yet
	senders int        // the goroutines sending the queue

	sends atomic.Int64 // sends made, for the tests (Sends)
}

// Call is one queued call: its payload, and once settled its outcome.
type Call[T any] struct {
	// Op is the driver's payload: its arguments, and the outcome Send
	// writes into it before it settles the call.
	Op T
	// Acquire marks a call that takes a slot: its caller, if its context
	// ends, waits on for the outcome (see Queue.Do).
	Acquire bool

	err  error
	done chan struct{} // closed once settled
}

// Settle reports err as c's outcome (nil for success) and wakes its
// caller. Only the first Settle of a call counts; Send alone calls it,
// from its one goroutine.
func (c *Call[T]) Settle(err error) {
	select {
	case <-c.done:
	default:
		c.err = err
		close(c.done)
	}
}

// errUnsettled is the outcome of a call its send returned without
// settling: a bug in Send, reported rather than left to time out.
var errUnsettled = errors.New("the slot call's send gave no outcome")

// Do queues c and waits for its outcome, for at most Timeout and until ctx
// ends; an Acquire's caller whose ctx ends waits on for the outcome,
// within Timeout, before it returns ctx's error. A call given up on may
// still be sent: an acquire's caller releases the slot
// (driver.SharedSlots). A timeout's error does not wrap
// context.DeadlineExceeded: the server failed to answer, which is a store
// failure to log and count, not a request that ended (the middlewares'
// fail-closed answer tells them apart by it).
func (q *Queue[T]) Do(ctx context.Context, c *Call[T]) error {
	c.done = make(chan struct{})
	q.mu.Lock()
	q.queue = append(q.queue, c)
	start := q.senders < max(q.Senders, 1)
	if start {
		q.senders++
	}
	q.mu.Unlock()
	if start {
		go q.send()
	}
	var timeout <-chan time.Time // nil, never ready, without a Timeout
	if q.Timeout > 0 {
		t := time.NewTimer(q.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.Acquire {
			// Wait for the acquire's outcome (within the timeout), so
			// that the caller's release is sent after it, never in a
			// pipeline that runs before it and leaves the slot taken
			// until its lease runs out.
			select {
			case <-c.done:
			case <-timeout:
			}
		}
		return ctx.Err()
	case <-timeout:
		return fmt.Errorf("no reply within %s", q.Timeout)
	}
}

// Sends reports how many sends the queue has made.
func (q *Queue[T]) Sends() int64 { return q.sends.Load() }

// send sends the queue, send after send of at most Max calls, until it is
// empty.
func (q *Queue[T]) send() {
	for {
		q.mu.Lock()
		n := len(q.queue)
		if q.Max > 0 {
			n = min(n, q.Max)
		}
		if n == 0 {
			q.senders--
			q.mu.Unlock()
			return
		}
		calls := q.queue[:n:n]
		q.queue = q.queue[n:]
		if len(q.queue) == 0 {
			q.queue = nil
		}
		q.mu.Unlock()
		q.sends.Add(1)
		q.Send(calls)
		for _, c := range calls {
			c.Settle(errUnsettled)
		}
	}
}
