package commit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
)

// gatedWriter records batch sizes; the first batch waits for release.
type gatedWriter struct {
	entered chan struct{} // closed when the first batch starts
	release chan struct{}
	fail    error
	once    sync.Once
	sizes   []int // touched by the committer goroutine only
}

func (w *gatedWriter) writeBatch(batch []Op) error {
	w.once.Do(func() { close(w.entered); <-w.release })
	w.sizes = append(w.sizes, len(batch))
	return w.fail
}

func TestCommitterCapsBatches(t *testing.T) {
	errDisk := errors.New("disk on fire")
	tests := []struct {
		name      string
		fail      error
		wantSizes []int
		want      store.Stats
	}{
		{"committed", nil, []int{1, 3, 3, 3, 1}, store.Stats{Commits: 5, Writes: 11}},
		{"failed", errDisk, []int{1, 3, 3, 3, 1}, store.Stats{Failed: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{}), fail: tt.fail}
			c := New(w.writeBatch, clock.System{}, 16, 3, nil)
			var mu sync.Mutex // protects got
			var got []error
			done := func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }
			if err := c.Enqueue(Op{Done: done}); err != nil {
				t.Fatal(err)
			}
			<-w.entered // the committer holds the first batch
			for range 10 {
				if err := c.Enqueue(Op{Done: done}); err != nil {
					t.Fatal(err)
				}
			}
			close(w.release)
			c.close() // flushes the queue

			if !slices.Equal(w.sizes, tt.wantSizes) {
				t.Errorf("got batch sizes %v, want %v", w.sizes, tt.wantSizes)
			}
			if len(got) != 11 {
				t.Fatalf("got %d done calls, want 11", len(got))
			}
			for _, err := range got {
				if !errors.Is(err, tt.fail) {
					t.Errorf("got done(%v), want done(%v)", err, tt.fail)
				}
			}
			if st := c.Stats(); st != tt.want {
				t.Errorf("got stats %+v, want %+v", st, tt.want)
			}
			if err := c.Enqueue(Op{Done: done}); !errors.Is(err, store.ErrClosed) {
				t.Errorf("got enqueue after close = %v, want ErrClosed", err)
			}
		})
	}
}

// stuckWriter never finishes a batch until release is closed.
type stuckWriter struct{ release chan struct{} }

func (w *stuckWriter) writeBatch([]Op) error { <-w.release; return nil }

// stuckCommitter is a committer whose writer hangs (a hung disk), with a
// one-write queue and one write per batch.
func stuckCommitter(t *testing.T) *Committer {
	t.Helper()
	w := &stuckWriter{release: make(chan struct{})}
	c := New(w.writeBatch, clock.System{}, 1, 1, nil)
	t.Cleanup(func() { close(w.release); c.close() })
	return c
}

// A probe stuck behind a hung disk is unhealthy once Health's budget
// passes; a caller joining it is bounded by its own context too.
func TestHealthOfAStuckProbe(t *testing.T) {
	c := stuckCommitter(t)
	c.healthBudget = time.Millisecond
	if err := c.Check(context.Background()); !errors.Is(err, store.ErrUnhealthy) {
		t.Fatalf("probe stuck: got %v, want ErrUnhealthy", err)
	}
	c.healthBudget = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller joining the stuck probe: got %v, want context.Canceled", err)
	}
}

// A committer stuck on a write with its queue full is unhealthy at once:
// Health must not wait for room to queue a probe (it would hang with it).
func TestHealthOfAFullQueue(t *testing.T) {
	c := stuckCommitter(t)
	c.healthBudget = time.Hour
	for range 2 { // the first is the stuck batch; the second fills the queue
		if err := c.Enqueue(Op{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Check(context.Background()); !errors.Is(err, store.ErrUnhealthy) {
		t.Fatalf("queue full behind a stuck write: got %v, want ErrUnhealthy", err)
	}
}
