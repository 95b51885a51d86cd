package rate_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// BenchmarkAllowShared is BenchmarkAllow on a shared store (Redis), bare
// and with each of the features that sit in front of its trips: the
// refusal cache, and leases with it. Every hit is allowed, so the cache
// only looks and the bare path is what a hit pays for the layers it does
// not use.
func BenchmarkAllowShared(b *testing.B) {
	for _, layers := range []struct {
		name string
		opt  rate.Options
	}{
		{"bare", rate.Options{RefusalCacheFor: -1}},
		{"refusals", rate.Options{}},
		{"refusals+leases", rate.Options{Lease: 64}},
	} {
		for _, km := range benchKeyModes {
			keys := benchClients(km.clients)
			b.Run(layers.name+"/"+km.name, func(b *testing.B) {
				opt := layers.opt
				opt.Name = "bench"
				_, lim := openRedis(b, benchLimit, time.Hour, opt)
				ctx := context.Background()
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(benchCallers)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := keys[int(next.Add(1))%len(keys)]
						v, err := lim.Allow(ctx, key)
						if err != nil || !v.Allowed {
							b.Errorf("allow %q: %+v, %v", key, v, err)
							return
						}
					}
				})
			})
		}
	}
}
