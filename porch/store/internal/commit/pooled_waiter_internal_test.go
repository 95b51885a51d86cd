package commit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
)

// Do reuses its waiter from a sync.Pool. A caller whose
// ctx ends leaves its waiter to the committer's late answer; the waiter must
// never be handed to another Do, or that Do would read the abandoned write's
// answer as its own. Each write here carries its own expected outcome (an
// error naming it, or nil), the writer answers a random subset as failed,
// deferred (carried to the next batch) or committed, and callers cancel at
// random moments, including while their answer is being sent. Every Do that
// returns anything but ctx.Err() must return its own write's outcome.
func TestDoPooledWaiterNeverCrossesCallers(t *testing.T) {
	var deferOnce sync.Map // op id -> deferred once already
	w := func(batch []Op) error {
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		for i := range batch {
			id := batch[i].Exec.Args[0].(int)
			switch id % 5 {
			case 1:
				batch[i].Failed = fmt.Errorf("write %d: %w", id, store.ErrWriteFailed)
			case 2:
				if _, loaded := deferOnce.LoadOrStore(id, true); !loaded {
					batch[i].Deferred = true
				}
			}
		}
		return nil
	}
	c := New(w, clock.System{}, 64, 8, nil)
	defer c.close()
	var next atomic.Int64
	var wrong, answered, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 2000 {
				id := int(next.Add(1))
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch r.IntN(3) {
				case 0:
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(300))*time.Microsecond)
				case 1:
					ctx, cancel = context.WithCancel(context.Background())
					go func(d time.Duration) { time.Sleep(d); cancel() }(time.Duration(r.IntN(100)) * time.Microsecond)
				}
				err := c.Do(ctx, Op{Exec: &Statement{Query: "x", Args: []any{id}}})
				cancel()
				switch {
				case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
					cancelled.Add(1)
					continue
				}
				answered.Add(1)
				want := id%5 == 1
				if (err != nil) != want || (err != nil && err.Error() != fmt.Sprintf("write %d: %v", id, store.ErrWriteFailed)) {
					if wrong.Add(1) <= 5 {
						t.Errorf("write %d: Do returned %v, which is not its own outcome", id, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("answered %d, cancelled %d, wrong %d", answered.Load(), cancelled.Load(), wrong.Load())
	if cancelled.Load() == 0 {
		t.Fatal("no Do was cancelled: the race was not exercised")
	}
}
