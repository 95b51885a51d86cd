package postgres_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// BenchmarkReserveFreshKey is an idempotent request with a fresh key on
// the shared store, without HTTP: Reserve (the owner's transaction and the
// key's lock), Load (a miss), Save (the response, committed). 16 owners
// run at once (8 per GOMAXPROCS on 2 cores), within the default KeyConns (32).
func BenchmarkReserveFreshKey(b *testing.B) {
	ctx := context.Background()
	p, err := postgres.Open(ctx, pgtest.DSN(b), postgres.Options{})
	if err != nil {
		b.Fatalf("open postgres: %v", err)
	}
	b.Cleanup(func() { p.Close(context.Background()) })
	var next atomic.Int64
	res := driver.Response{Digest: []byte("digest"), Status: 201, ContentType: "text/plain", Body: []byte("created")}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "idem:bench:" + strconv.FormatInt(next.Add(1), 10)
			hold, err := p.Reserve(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if _, ok, err := hold.Load(ctx); err != nil || ok {
				b.Errorf("Load: ok %v, err %v; want a miss", ok, err)
				hold.Release()
				return
			}
			if err := hold.Save(ctx, res, time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkAddHitLowConcurrency is the harness's PostgreSQL one-key row
// at one and two connections without HTTP: each caller counts one hit of
// one key and waits for its commit before the next, so what it measures
// is a batch's latency, and with two callers whether batches overlap.
func BenchmarkAddHitLowConcurrency(b *testing.B) {
	for _, callers := range []int{1, 2} {
		for _, keys := range []string{"one-key", "two-keys"} {
			b.Run(strconv.Itoa(callers)+"/"+keys, func(b *testing.B) {
				ctx := context.Background()
				p, err := postgres.Open(ctx, pgtest.DSN(b), postgres.Options{Options: store.Options{PruneRows: pruneRowsEnv()}})
				if err != nil {
					b.Fatalf("open postgres: %v", err)
				}
				b.Cleanup(func() { p.Close(context.Background()) })
				rule := algorithm.MustRule(algorithm.Fixed, 1<<40, time.Hour, 0)
				var next atomic.Int64
				b.ResetTimer()
				done := make(chan struct{}, callers)
				for c := range callers {
					key := "bench:low:0"
					if keys == "two-keys" {
						key = "bench:low:" + strconv.Itoa(c)
					}
					go func() {
						defer func() { done <- struct{}{} }()
						reply := make(chan error, 1)
						for next.Add(1) <= int64(b.N) {
							if err := p.AddHit(key, rule, 1, driver.Lease{}, func(_ driver.Hit, err error) { reply <- err }); err != nil {
								b.Error(err)
								return
							}
							if err := <-reply; err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				for range callers {
					<-done
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
			})
		}
	}
}

func pruneRowsEnv() int { n, _ := strconv.Atoi(os.Getenv("PRUNE")); return n }
