package postgres

import (
	"context"
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
