package actor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
)

// benchPool starts a pool with the default options, closed when b ends.
func benchPool(b *testing.B) *actor.Pool {
	b.Helper()
	p := actor.Of(porch.NewPool(porch.PoolOptions{}))
	b.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// benchKeys returns n distinct keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkRoundTrip measures one round trip through the pool: hand a job to the
// key's actor, let it answer at once, wait for the reply. That is the hop
// every limiter verdict and idempotency decision pays before any I/O.
//
// serial is one caller (the bare latency of the hop); parallel is 32
// callers per GOMAXPROCS, as a server under load has, on one key (one actor
// does all the work) and on many keys (every actor has a share).
func BenchmarkRoundTrip(b *testing.B) {
	job := func(shard int, r actor.Reply[int]) { r.Send(shard, nil) }
	for _, bc := range []struct {
		name string
		keys []string
	}{
		{"one-key", benchKeys(1)},
		{"many-keys", benchKeys(4096)},
	} {
		b.Run(bc.name+"/serial", func(b *testing.B) {
			p := benchPool(b)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := call(ctx, p, bc.keys[i%len(bc.keys)], job); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			p := benchPool(b)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919)) // spread the goroutines over the keys
				for pb.Next() {
					if _, err := call(ctx, p, bc.keys[i%len(bc.keys)], job); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
