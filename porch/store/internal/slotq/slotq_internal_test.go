package slotq

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fake is a Send that reports each send's size on started and then
// blocks until release yields, settling every call with err.
type fake struct {
	started chan int
	release chan struct{}
	err     error

	mu      sync.Mutex
	running int // sends in flight
	most    int // the most sends in flight at once
}

func newFake() *fake {
	return &fake{started: make(chan int, 100), release: make(chan struct{})}
}

func (f *fake) send(calls []*Call[int]) {
	f.mu.Lock()
	f.running++
	f.most = max(f.most, f.running)
	f.mu.Unlock()
	f.started <- len(calls)
	<-f.release
	f.mu.Lock()
	f.running--
	f.mu.Unlock()
	for _, c := range calls {
		c.Op *= 10 // the outcome, written before the call is settled
		c.Settle(f.err)
	}
}

// next returns the size of the next send to start, or fails if none
// does.
func (f *fake) next(t *testing.T) int {
	t.Helper()
	select {
	case n := <-f.started:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no send started")
		return 0
	}
}

// do runs q.Do for op in a goroutine; its outcome arrives on the channel
// returned.
func do(q *Queue[int], ctx context.Context, op int, acquire bool) <-chan error {
	out := make(chan error, 1)
	go func() {
		c := &Call[int]{Op: op, Acquire: acquire}
		err := q.Do(ctx, c)
		if err == nil && c.Op != op*10 {
			err = errors.New("the outcome written by Send was not seen")
		}
		out <- err
	}()
	return out
}

// waitQueued waits until n calls are queued for a send, or fails.
func waitQueued(t *testing.T, q *Queue[int], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		got := len(q.queue)
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		runtime.Gosched()
	}
}

// get returns a call's outcome, or fails if it never comes: a queue
// that loses a call, or waits without bound, fails rather than hangs.
func get(t *testing.T, out <-chan error) error {
	t.Helper()
	select {
	case err := <-out:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a call never returned")
		return nil
	}
}

func wait(t *testing.T, outs []<-chan error) {
	t.Helper()
	for _, out := range outs {
		if err := get(t, out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharesSends checks that calls queued behind a send in flight go
// together in the next: 1 + 20 calls in 2 sends.
func TestSharesSends(t *testing.T) {
	f := newFake()
	q := &Queue[int]{Send: f.send, Timeout: time.Minute}
	outs := []<-chan error{do(q, context.Background(), 1, true)}
	if n := f.next(t); n != 1 {
		t.Fatalf("the first send carried %d calls, want 1", n)
	}
	for i := range 20 {
		outs = append(outs, do(q, context.Background(), i, i%2 == 0))
	}
	waitQueued(t, q, 20)
	close(f.release)
	if n := f.next(t); n != 20 {
		t.Fatalf("the second send carried %d calls, want the 20 queued", n)
	}
	wait(t, outs)
	if n := q.Sends(); n != 2 {
		t.Fatalf("21 calls took %d sends, want 2", n)
	}
}

// TestSendersBound checks that no more than Senders sends run at once,
// and that Max bounds each: 7 calls at Senders 2, Max 1 run 2 sends at
// once, 7 sends in all.
func TestSendersBound(t *testing.T) {
	f := newFake()
	q := &Queue[int]{Send: f.send, Senders: 2, Max: 1, Timeout: time.Minute}
	var outs []<-chan error
	for i := range 7 {
		outs = append(outs, do(q, context.Background(), i, false))
	}
	for range 2 {
		if n := f.next(t); n != 1 {
			t.Fatalf("a send carried %d calls, want Max, 1", n)
		}
	}
	waitQueued(t, q, 5) // the rest wait for a sender
	f.mu.Lock()
	running := f.running
	f.mu.Unlock()
	if running != 2 {
		t.Fatalf("%d sends in flight, want Senders, 2", running)
	}
	close(f.release)
	wait(t, outs)
	if q.Sends() != 7 || f.most != 2 {
		t.Fatalf("%d sends, at most %d at once; want 7, at most 2", q.Sends(), f.most)
	}
}

// TestMaxBound checks that calls beyond Max go into a next send: 5 calls
// queued behind a send at Max 3 go in sends of 3 and 2.
func TestMaxBound(t *testing.T) {
	f := newFake()
	q := &Queue[int]{Send: f.send, Max: 3, Timeout: time.Minute}
	outs := []<-chan error{do(q, context.Background(), 0, false)}
	f.next(t)
	for i := range 5 {
		outs = append(outs, do(q, context.Background(), i, false))
	}
	waitQueued(t, q, 5)
	close(f.release)
	for _, want := range []int{3, 2} {
		if n := f.next(t); n != want {
			t.Fatalf("a send carried %d calls, want %d", n, want)
		}
	}
	wait(t, outs)
}

// TestSendError checks that the error Send settles a call with is its
// caller's.
func TestSendError(t *testing.T) {
	f := newFake()
	f.err = errors.New("connection reset")
	close(f.release)
	q := &Queue[int]{Send: f.send, Timeout: time.Minute}
	if err := get(t, do(q, context.Background(), 1, true)); !errors.Is(err, f.err) {
		t.Fatalf("got %v, want %v", err, f.err)
	}
}

// TestUnsettled checks that a call its send did not settle fails at once
// rather than waiting out Timeout.
func TestUnsettled(t *testing.T) {
	q := &Queue[int]{Send: func([]*Call[int]) {}}
	if err := get(t, do(q, context.Background(), 1, true)); !errors.Is(err, errUnsettled) {
		t.Fatalf("got %v, want %v", err, errUnsettled)
	}
}

// TestTimeout checks that a call no send answers fails once Timeout has
// passed, with an error that is not the context's (a store failure, not
// a request that ended).
func TestTimeout(t *testing.T) {
	f := newFake()
	defer close(f.release)
	const timeout = 50 * time.Millisecond
	q := &Queue[int]{Send: f.send, Timeout: timeout}
	for _, acquire := range []bool{false, true} {
		start := time.Now()
		err := get(t, do(q, context.Background(), 1, acquire))
		took := time.Since(start)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || err.Error() != "no reply within 50ms" {
			t.Fatalf("acquire %v: got %v, want no reply within 50ms", acquire, err)
		}
		// The upper bound is loose for a loaded machine; what matters is
		// that the wait ends, and not before Timeout.
		if took < timeout || took > 5*time.Second {
			t.Fatalf("acquire %v: failed after %s, want about %s", acquire, took, timeout)
		}
	}
}

// TestAcquireWaitsForOutcome checks that an acquire whose ctx ends
// returns only once its call is settled, so that its caller's release
// cannot go in an earlier send; a release whose ctx ends returns at once.
func TestAcquireWaitsForOutcome(t *testing.T) {
	f := newFake()
	q := &Queue[int]{Send: f.send, Timeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	acq := do(q, ctx, 1, true)
	f.next(t)
	rel := do(q, ctx, 2, false)
	waitQueued(t, q, 1)
	cancel()
	// The release returns while the send still blocks: its caller gives
	// up at once.
	if err := get(t, rel); !errors.Is(err, context.Canceled) {
		t.Fatalf("release: got %v, want %v", err, context.Canceled)
	}
	// The acquire must not have: the window only gives a wrong queue the
	// time to return early; a right one passes whatever the timing.
	select {
	case err := <-acq:
		t.Fatalf("the acquire returned (%v) before its send settled it", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(f.release)
	if err := get(t, acq); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire: got %v, want %v", err, context.Canceled)
	}
}

// TestAcquireWaitBounded checks that an acquire whose ctx ends waits for
// its outcome no longer than Timeout.
func TestAcquireWaitBounded(t *testing.T) {
	f := newFake()
	defer close(f.release)
	q := &Queue[int]{Send: f.send, Timeout: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	acq := do(q, ctx, 1, true)
	f.next(t)
	cancel()
	if err := get(t, acq); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want %v", err, context.Canceled)
	}
}
