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

// A write the batch writer defers is not answered with its batch: it leads
// the next one, is written there, and is answered once, with that
// batch's outcome; a write queued meanwhile comes after it.
func TestCommitterCarriesDeferredWrites(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string // the Exec queries of each batch, in order
	deferOnce := true
	c := New(func(batch []Op) error {
		mu.Lock()
		defer mu.Unlock()
		var qs []string
		for i := range batch {
			qs = append(qs, batch[i].Exec.Query)
			if batch[i].Exec.Query == "b" && deferOnce {
				deferOnce = false
				batch[i].Deferred = true
			}
		}
		seen = append(seen, qs)
		return nil
	}, clock.System{}, 16, 16, nil)
	answers := make(chan string, 8)
	op := func(q string) Op {
		return Op{Exec: &Statement{Query: q}, Done: func(err error) {
			if err != nil {
				t.Errorf("%s: %v", q, err)
			}
			answers <- q
		}}
	}
	// a and b in one batch: hold the writer until both are queued.
	mu.Lock()
	for _, q := range []string{"a", "b"} {
		if err := c.Enqueue(op(q)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Unlock()
	if got := <-answers; got != "a" {
		t.Fatalf("first answer %q, want a (b was deferred)", got)
	}
	if err := c.Enqueue(op("c")); err != nil {
		t.Fatal(err)
	}
	got := []string{<-answers, <-answers}
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("then answered %v, want [b c]", got)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || seen[1][0] != "b" {
		t.Errorf("batches %v: want the deferred b to lead the second", seen)
	}
	if st := c.Stats(); st.Writes != 3 {
		t.Errorf("Stats.Writes = %d, want 3 (a deferred write counts once)", st.Writes)
	}
	select {
	case q := <-answers:
		t.Errorf("%s answered twice", q)
	default:
	}
}
