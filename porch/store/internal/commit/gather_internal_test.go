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
	c := NewGathering(w.writeBatch, clock.System{}, 64, 64, nil, time.Hour)
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
	c := NewGathering(w.writeBatch, clock.System{}, 64, 64, nil, time.Millisecond)
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
