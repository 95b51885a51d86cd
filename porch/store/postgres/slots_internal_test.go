package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// TestSlotsCommitAsync checks that every slot change (an acquire, a
// refused acquire, a renewal, a release) commits at synchronous_commit
// off under the default durability (SurvivesPowerLoss), so that one key's
// acquires do not hold its lock through a WAL flush each (see slotsTx), and
// that the pool is left clean after them.
func TestSlotsCommitAsync(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	seen, server := recordSynchronousCommit(t, p)
	if server == "off" {
		t.Skip("the server's synchronous_commit is off already")
	}
	ctx := context.Background()
	if _, err := p.pool.Exec(ctx, `CREATE TRIGGER record_sync AFTER INSERT OR UPDATE OR DELETE ON porch_inflight FOR EACH STATEMENT EXECUTE FUNCTION record_sync()`); err != nil {
		t.Fatal(err)
	}
	const key = "inflight:async:p:alice"
	steps := []struct {
		name string
		do   func() error
	}{
		{"an acquire", func() error {
			ok, _, err := p.AcquireSlot(ctx, key, "a", 1, time.Minute)
			if err == nil && !ok {
				t.Fatal("the first acquire was refused")
			}
			return err
		}},
		{"a refused acquire", func() error {
			ok, _, err := p.AcquireSlot(ctx, key, "b", 1, time.Minute)
			if err == nil && ok {
				t.Fatal("an acquire past the limit took a slot")
			}
			return err
		}},
		{"a renewal", func() error {
			lost, err := p.RenewSlots(ctx, []driver.SlotRef{{Key: key, ID: "a"}}, time.Minute)
			if err == nil && lost != 0 {
				t.Fatalf("the renewal lost %d slots", lost)
			}
			return err
		}},
		{"a release", func() error { return p.ReleaseSlot(ctx, key, "a") }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := seen(); len(got) == 0 || !allAre(got, "off") {
			t.Errorf("%s: committed with synchronous_commit %v, want off", st.name, got)
		}
	}
	poolIsClean(t, "the pool", p.pool)
}

// TestSlotsSharePipelines checks that the slot calls of concurrent
// requests share round trips (newSlotQueue) and stay exact: 64 acquires of
// one key at a limit of 5, sent at once, take exactly 5 slots, and the
// acquires and releases go in fewer pipelines than calls.
func TestSlotsSharePipelines(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	const calls, limit = 64, 5
	const key = "inflight:pipe:p:alice"
	ctx := context.Background()
	for round := range 3 {
		before := p.slotq.Sends()
		var wg sync.WaitGroup
		var taken atomic.Int64
		start := make(chan struct{})
		for i := range calls {
			wg.Go(func() {
				<-start
				ok, held, err := p.AcquireSlot(ctx, key, fmt.Sprintf("r%d-%d", round, i), limit, time.Minute)
				switch {
				case err != nil:
					t.Error(err)
				case held < 1 || held > limit:
					t.Errorf("acquire: held %d, want 1 to %d", held, limit)
				case ok:
					taken.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if taken.Load() != limit {
			t.Fatalf("round %d: %d of %d concurrent acquires took a slot, want exactly %d", round, taken.Load(), calls, limit)
		}
		start = make(chan struct{})
		for i := range calls {
			wg.Go(func() {
				<-start
				if err := p.ReleaseSlot(ctx, key, fmt.Sprintf("r%d-%d", round, i)); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		pipes := p.slotq.Sends() - before
		var n int
		if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM porch_inflight`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("round %d: %d slots held after every release (%v), want 0", round, n, err)
		}
		t.Logf("round %d: %d acquires and %d releases in %d pipelines", round, calls, calls, pipes)
		if pipes >= 2*calls {
			t.Errorf("round %d: %d slot calls took %d pipelines; concurrent calls should share them", round, 2*calls, pipes)
		}
	}
	poolIsClean(t, "the pool", p.pool)
}

// TestSlotsAbandonedAcquireSettled checks that an acquire whose caller's
// context has ended returns only once the acquire's transaction has run
// (or failed), so that the release its caller sends next
// (driver.SharedSlots) cannot run before it, in another pipeline, and
// leave the slot taken for a whole lease. The key's lock is held
// elsewhere meanwhile, so that the acquire waits for it.
func TestSlotsAbandonedAcquireSettled(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{Timeout: 3 * time.Second})
	const key = "inflight:abandoned:p:alice"
	bg := context.Background()
	tx, err := p.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, pgLockSlots, dbKey(key)); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		tx.Commit(bg) //nolint:errcheck // the lock goes with the transaction either way
	}()
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	p.AcquireSlot(ctx, key, "abandoned", 10, time.Minute) //nolint:errcheck // taken or not, the caller releases
	if err := p.ReleaseSlot(bg, key, "abandoned"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the lock's holder, for a late acquire to land
	var n int
	if err := p.pool.QueryRow(bg, `SELECT count(*) FROM porch_inflight`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("an abandoned acquire holds a slot after its release (%d rows), want none", n)
	}
}
