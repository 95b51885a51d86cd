package rate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// sharedStub is a shared store that counts nothing: enough for New to
// pick its counter.
type sharedStub struct{}

var _ driver.SharedCounters = sharedStub{}

func (sharedStub) Wall() time.Time              { return t0 }
func (sharedStub) Health(context.Context) error { return nil }
func (sharedStub) Stats() store.Stats           { return store.Stats{} }
func (sharedStub) Close(context.Context) error  { return nil }
func (sharedStub) ClaimPolicy(context.Context, driver.Policy) (func(), error) {
	return func() {}, nil
}
func (sharedStub) AddHit(string, driver.Rule, int64, driver.Lease, func(driver.Hit, error)) error {
	return nil
}
func (sharedStub) GiveBack(string, driver.Lease, func(error)) error           { return nil }
func (sharedStub) PeekHit(string, driver.Rule, func(driver.Hit, error)) error { return nil }
func (sharedStub) ResetHit(string, func(error)) error                         { return nil }
func (sharedStub) TakeBack(string, time.Time, int64, func(error)) error       { return nil }

// New puts in front of a shared store's counting the layer its options
// ask for first: the refusal cache by default and in front of leases,
// leases alone when the cache is off, neither when neither is asked for.
func TestSharedCountingLayers(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"bare", Options{RefusalCacheFor: -1}, "*count.shared"},
		{"refusal cache by default", Options{}, "*count.refusals"},
		{"leases alone", Options{RefusalCacheFor: -1, Lease: 8}, "*count.leases"},
		{"both", Options{Lease: 8}, "*count.refusals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := porch.NewPool(porch.PoolOptions{Size: 1})
			t.Cleanup(func() { pool.Close(context.Background()) })
			l, err := New(pool, sharedStub{}, 1, time.Hour, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			if got := fmt.Sprintf("%T", l.counter); got != tt.want {
				t.Errorf("got %s in front, want %s", got, tt.want)
			}
		})
	}
}
