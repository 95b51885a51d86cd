package inflight_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
)

// On a shared store, a request that runs for many leases keeps its slot:
// its limiter renews it. Another instance is refused throughout.
func TestLeaseRenewedWhileHeld(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			// Renewed every third of it, the lease must outlast a
			// starved machine's late renewal (-race beside busy loops
			// missed a 300 ms one), and the holder keeps it for three.
			const lease = time.Second
			st, another := k.open(t)
			a := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{Lease: lease})
			b := inflight.New(newPool(t, porch.PoolOptions{}), another(t), 1, inflight.Options{Lease: lease})
			t.Cleanup(func() { a.Close(context.Background()); b.Close(context.Background()) })
			release, err := a.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			until := time.Now().Add(3 * lease)
			for time.Now().Before(until) {
				if rel, err := b.Acquire(context.Background(), "alice"); !errors.Is(err, inflight.ErrLimited) {
					if err == nil {
						rel()
					}
					t.Fatalf("another instance's acquire while the holder runs: %v, want ErrLimited (the lease was not renewed)", err)
				}
				time.Sleep(lease / 10) // the pace of the probes, not a synchronisation
			}
			release()
			rel, err := b.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatalf("acquire after the holder gave its slot back: %v", err)
			}
			rel()
		})
	}
}

// An instance that stops renewing (it died: here its limiter stops
// without giving its slot back) loses its slot within one lease, on
// every shared store; the slot is not free before.
func TestDeadHolderFreedWithinLease(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			const lease = time.Second
			st, another := k.open(t)
			dead := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{Lease: lease})
			live := inflight.New(newPool(t, porch.PoolOptions{}), another(t), 1, inflight.Options{Lease: lease})
			t.Cleanup(func() { live.Close(context.Background()) })
			if _, err := dead.Acquire(context.Background(), "alice"); err != nil {
				t.Fatal(err)
			}
			taken := time.Now()
			dead.Close(context.Background()) // no more renewals, no give-back
			if rel, err := live.Acquire(context.Background(), "alice"); err == nil {
				rel()
				if time.Since(taken) < lease/2 {
					t.Fatal("the dead holder's slot was free before its lease ran out")
				}
			}
			deadline := taken.Add(lease + 10*time.Second)
			for {
				rel, err := live.Acquire(context.Background(), "alice")
				if err == nil {
					rel()
					t.Logf("free %s after the holder's last renewal (lease %s)", time.Since(taken).Round(time.Millisecond), lease)
					return
				}
				if !errors.Is(err, inflight.ErrLimited) {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dead holder's slot still held %s after it stopped renewing (lease %s)", time.Since(taken), lease)
				}
				time.Sleep(20 * time.Millisecond) // polling the store's clock
			}
		})
	}
}
