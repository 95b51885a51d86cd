package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
)

// roundTrips counts the commands a client sends and the round trips
// that carry them (a command alone, or a pipeline).
type roundTrips struct{ cmds, trips atomic.Int64 }

func (h *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.cmds.Add(1)
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

// TestSlotsSharePipelines checks that the slot calls of concurrent
// requests share round trips (newSlotQueue) and stay exact: 64 acquires of
// one key at a limit of 5, sent at once, take exactly 5 slots, and the
// acquires and releases go in fewer round trips than calls. One round trip
// per call was the in-flight limiter's cost on Redis.
func TestSlotsSharePipelines(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s, err := Open(context.Background(), c, Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	rt := &roundTrips{}
	c.AddHook(rt)
	const calls, limit = 64, 5
	key := "inflight:pipe:p:alice"
	for round := range 3 {
		rt.cmds.Store(0)
		rt.trips.Store(0)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var taken atomic.Int64
		var mu sync.Mutex
		var errs []error
		for i := range calls {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("r%d-%d", round, i)
				ok, held, err := s.AcquireSlot(context.Background(), key, id, limit, time.Minute)
				if err == nil && ok {
					taken.Add(1)
				}
				if err == nil && (held < 1 || held > limit) {
					err = fmt.Errorf("acquire %s: held %d, want 1 to %d", id, held, limit)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			t.Fatal(err)
		}
		if taken.Load() != limit {
			t.Fatalf("round %d: %d of %d concurrent acquires took a slot, want exactly %d", round, taken.Load(), calls, limit)
		}
		// Release every id, taken or not, at once.
		start = make(chan struct{})
		for i := range calls {
			wg.Go(func() {
				<-start
				if err := s.ReleaseSlot(context.Background(), key, fmt.Sprintf("r%d-%d", round, i)); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		cmds, trips := rt.cmds.Load(), rt.trips.Load()
		if n := c.ZCard(context.Background(), s.counterKey(key)).Val(); n != 0 {
			t.Fatalf("round %d: %d slots held after every release, want 0", round, n)
		}
		t.Logf("round %d: %d acquires and %d releases: %d commands in %d round trips", round, calls, calls, cmds, trips)
		if trips >= 2*calls {
			t.Errorf("round %d: %d slot calls took %d round trips; concurrent calls should share pipelines", round, 2*calls, trips)
		}
	}
}
