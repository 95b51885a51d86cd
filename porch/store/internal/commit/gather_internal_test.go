package commit

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
)

// sizesWriter records each batch's size; while hold is set, a batch
// tells entered that it started and waits until the test closes hold.
type sizesWriter struct {
	mu      sync.Mutex // protects sizes
	sizes   []int
	hold    chan struct{}
	entered chan struct{}
}

func (w *sizesWriter) writeBatch(batch []Op) error {
	if w.hold != nil {
		w.entered <- struct{}{}
		<-w.hold
		w.hold = nil
	}
	w.mu.Lock()
	w.sizes = append(w.sizes, len(batch))
	w.mu.Unlock()
	return nil
}

func (w *sizesWriter) got() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sizes)
}

// answered returns a Done that counts into wg.
func answered(t *testing.T, wg *sync.WaitGroup) func(error) {
	wg.Add(1)
	return func(err error) {
		if err != nil {
			t.Errorf("write failed: %v", err)
		}
		wg.Done()
	}
}

// gatherCommitter is a gathering committer over w whose waits are reported
// on the returned channel. gather is long: a test that does not supply the
// writes a batch waits for hangs, and fails by its deadline.
func gatherCommitter(t *testing.T, w *sizesWriter) (*Committer, chan struct{}) {
	t.Helper()
	c := NewGathering(w.writeBatch, clock.System{}, 64, 64, nil, Gather{Siblings: time.Hour})
	waiting := make(chan struct{}, 1)
	c.gathering = func() { waiting <- struct{}{} }
	return c, waiting
}

// fill makes the committer's last batch GatherSiblings writes: one batch of
// one held by the writer while the rest queue.
func fill(t *testing.T, c *Committer, w *sizesWriter, wg *sync.WaitGroup) {
	t.Helper()
	hold := make(chan struct{})
	w.hold, w.entered = hold, make(chan struct{})
	if err := c.Enqueue(Op{Done: answered(t, wg)}); err != nil {
		t.Fatal(err)
	}
	<-w.entered // the first batch has its one write
	for range GatherSiblings {
		if err := c.Enqueue(Op{Done: answered(t, wg)}); err != nil {
			t.Fatal(err)
		}
	}
	close(hold)
	wg.Wait()
	if got, want := w.got(), []int{1, GatherSiblings}; !slices.Equal(got, want) {
		t.Fatalf("got batch sizes %v, want %v", got, want)
	}
}

// After a batch of GatherSiblings writes, a batch that starts with fewer
// waits for the rest and commits them together.
func TestCommitterGathersAfterABusyBatch(t *testing.T) {
	w := &sizesWriter{}
	c, waiting := gatherCommitter(t, w)
	defer c.close()
	var wg sync.WaitGroup
	fill(t, c, w, &wg)
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	<-waiting // the batch of one waits for more
	for range GatherSiblings - 1 {
		if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got, want := w.got(), []int{1, GatherSiblings, GatherSiblings}; !slices.Equal(got, want) {
		t.Errorf("got batch sizes %v, want %v", got, want)
	}
}

// A write that comes alone is never held: the committer's last batch was
// smaller than GatherSiblings, so with a wait of an hour each write is
// still answered at once.
func TestCommitterDoesNotHoldALoneWrite(t *testing.T) {
	w := &sizesWriter{}
	c, waiting := gatherCommitter(t, w)
	defer c.close()
	for range 3 {
		var wg sync.WaitGroup
		if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	select {
	case <-waiting:
		t.Error("a lone write waited for company")
	default:
	}
}

// The wait is bounded: a batch that does not reach the last one's size
// commits once gather has passed.
func TestCommitterGatherEnds(t *testing.T) {
	w := &sizesWriter{}
	c := NewGathering(w.writeBatch, clock.System{}, 64, 64, nil, Gather{Siblings: time.Millisecond})
	defer c.close()
	var wg sync.WaitGroup
	fill(t, c, w, &wg)
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got, want := w.got(), []int{1, GatherSiblings, 1}; !slices.Equal(got, want) {
		t.Errorf("got batch sizes %v, want %v", got, want)
	}
}

// Close does not wait out a gathering batch: the queue's closing ends the
// wait, and the batch commits with what it has.
func TestCommitterCloseEndsGather(t *testing.T) {
	w := &sizesWriter{}
	c, waiting := gatherCommitter(t, w)
	var wg sync.WaitGroup
	fill(t, c, w, &wg)
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	<-waiting
	c.close()
	wg.Wait()
	if got, want := w.got(), []int{1, GatherSiblings, 1}; !slices.Equal(got, want) {
		t.Errorf("got batch sizes %v, want %v", got, want)
	}
}

// pairCommitter is a committer that waits an hour for a second write
// beside a lone one it did not wait for (Gather.Pair); its waits are
// reported on the first channel returned, and each time it finds its
// queue empty on the second.
func pairCommitter(t *testing.T, w *sizesWriter) (*Committer, chan struct{}, chan struct{}) {
	t.Helper()
	c := newCommitter(w.writeBatch, clock.System{}, 64, 64, nil, Gather{Pair: time.Hour})
	waiting, parked := make(chan struct{}, 1), make(chan struct{}, 1)
	c.gathering = func() { waiting <- struct{}{} }
	c.parked = func() {
		select {
		case parked <- struct{}{}:
		default:
		}
	}
	go c.run()
	return c, waiting, parked
}

// Two writers taking turns: the write that queued while the last batch
// was out waits for the next one, and the two commit together.
func TestCommitterPairsAWriteThatQueuedMeanwhile(t *testing.T) {
	w := &sizesWriter{}
	c, waiting, parked := pairCommitter(t, w)
	defer c.close()
	var wg sync.WaitGroup
	hold := make(chan struct{})
	w.hold, w.entered = hold, make(chan struct{})
	<-parked // the first write comes to an idle committer
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	<-w.entered // the first batch has its one write, which came alone
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	close(hold)
	<-waiting // the write that queued meanwhile waits for a second
	if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got, want := w.got(), []int{1, 2}; !slices.Equal(got, want) {
		t.Errorf("got batch sizes %v, want %v", got, want)
	}
}

// A lone client's writes each find the committer waiting, so none waits
// for a second, even with a pair wait of an hour.
func TestCommitterDoesNotPairALoneClient(t *testing.T) {
	w := &sizesWriter{}
	c, waiting, parked := pairCommitter(t, w)
	defer c.close()
	for range 5 {
		<-parked // as a lone client's next request comes: after the last answer
		var wg sync.WaitGroup
		if err := c.Enqueue(Op{Done: answered(t, &wg)}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	select {
	case <-waiting:
		t.Error("a lone client's write waited for a second")
	default:
	}
	if got, want := w.got(), []int{1, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("got batch sizes %v, want %v", got, want)
	}
}
