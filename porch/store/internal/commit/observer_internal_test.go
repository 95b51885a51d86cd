package commit

import (
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
)

// The observer is told of each batch: its writes, how long the writer
// took on the store's clock, and its error.
func TestCommitterTellsTheObserverEachBatch(t *testing.T) {
	errDisk := errors.New("disk on fire")
	clk := porchtest.NewFakeClock(time.Unix(0, 0))
	w := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	calls := 0
	writer := func(batch []Op) error {
		err := w.writeBatch(batch)
		calls++ // the committer goroutine only
		clk.Advance(time.Duration(calls) * 10 * time.Millisecond)
		if calls == 2 {
			return errDisk
		}
		return err
	}
	obs := &porchtest.Observer{}
	c := New(writer, clk, 16, 3, obs)
	if err := c.Enqueue(Op{}); err != nil {
		t.Fatal(err)
	}
	<-w.entered // the committer holds the first batch
	for range 4 {
		if err := c.Enqueue(Op{}); err != nil {
			t.Fatal(err)
		}
	}
	close(w.release)
	c.close()

	want := []store.Batch{
		{Writes: 1, Took: 10 * time.Millisecond},
		{Writes: 3, Took: 20 * time.Millisecond, Err: errDisk},
		{Writes: 1, Took: 30 * time.Millisecond},
	}
	got := obs.Batches()
	if len(got) != len(want) {
		t.Fatalf("got %d batches observed (%+v), want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("batch %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// panicObserver panics on every batch.
type panicObserver struct{}

func (panicObserver) CommitBatch(store.Batch) { panic("metrics adapter bug") }

// An observer that panics does not stop the committer: each write is still
// answered with its batch's outcome (once, the panic killed the process).
func TestCommitterSurvivesAPanickingObserver(t *testing.T) {
	writer := func(batch []Op) error { return nil }
	c := New(writer, porchtest.NewFakeClock(time.Unix(0, 0)), 16, 3, panicObserver{})
	for i := range 3 {
		done := make(chan error, 1)
		if err := c.Enqueue(Op{Done: func(err error) { done <- err }}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("write %d: got %v, want committed", i, err)
		}
	}
	c.close()
}

// A write its batch writer settled apart (committed in a transaction of
// its own) is answered with its own outcome even when the rest of the
// batch failed.
func TestCommitterAnswersSettledWritesWithTheirOwnOutcome(t *testing.T) {
	errBatch := errors.New("the batch's hits failed")
	ownErr := errors.New("its own transaction failed")
	w := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	calls := 0
	writer := func(batch []Op) error {
		calls++ // the committer goroutine only
		if calls == 1 {
			return w.writeBatch(batch) // holds the committer while the three queue
		}
		if len(batch) != 3 {
			t.Errorf("got a batch of %d, want the 3 queued behind the first", len(batch))
			return errBatch
		}
		batch[0].Settled = true                          // committed apart
		batch[1].Settled, batch[1].Failed = true, ownErr // failed apart
		return errBatch
	}
	c := New(writer, porchtest.NewFakeClock(time.Unix(0, 0)), 16, 3, nil)
	if err := c.Enqueue(Op{}); err != nil {
		t.Fatal(err)
	}
	<-w.entered
	got := make([]chan error, 3)
	for i := range got {
		got[i] = make(chan error, 1)
		if err := c.Enqueue(Op{Done: func(err error) { got[i] <- err }}); err != nil {
			t.Fatal(err)
		}
	}
	close(w.release)
	for i, want := range []error{nil, ownErr, errBatch} {
		if err := <-got[i]; err != want {
			t.Errorf("write %d: got %v, want %v", i, err, want)
		}
	}
	c.close()
}
