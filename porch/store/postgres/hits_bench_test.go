package postgres_test

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// BenchmarkAddHitManyKeys is the load harness's PostgreSQL many-keys row
// without HTTP: 64 callers (32 per GOMAXPROCS on 2 cores, the harness's
// connections), each counting one hit at a time and waiting until it is
// durable, every hit on the next of 131,072 keys, so that nearly every hit
// is a key's first or second, as under wrk. hits/s is the throughput,
// writes/commit the committer's mean batch, µs/commit how long one batch
// took. It needs a server (PORCH_TEST_POSTGRES) and is skipped without one.
func BenchmarkAddHitManyKeys(b *testing.B) {
	const nkeys = 131072
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "rate:default:ip:198." + strconv.Itoa(18+i/65536) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
	}
	ctx := context.Background()
	p, err := postgres.Open(ctx, pgtest.DSN(b), store.Options{})
	if err != nil {
		b.Fatalf("open postgres: %v", err)
	}
	b.Cleanup(func() { p.Close(context.Background()) })
	var next atomic.Int64
	before := p.Stats()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan error, 1)
		answer := func(_ store.Hit, err error) { done <- err }
		for pb.Next() {
			key := keys[int(next.Add(1))%nkeys]
			if err := p.AddHit(key, time.Hour, 1, math.MaxInt64, answer); err != nil {
				b.Error(err)
				return
			}
			if err := <-done; err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	after := p.Stats()
	commits := after.Commits - before.Commits
	if f := after.Failed - before.Failed; f > 0 {
		b.Errorf("%d commits failed", f)
	}
	if commits > 0 {
		b.ReportMetric(float64(after.Writes-before.Writes)/float64(commits), "writes/commit")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(commits), "µs/commit")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
}

// BenchmarkReserveFreshKey is an idempotent request with a fresh key on
// the shared store, without HTTP: Reserve (the owner's transaction and the
// key's lock), Load (a miss), Save (the response, committed). 16 owners
// run at once (8 per GOMAXPROCS on 2 cores), within DefaultKeyConns.
func BenchmarkReserveFreshKey(b *testing.B) {
	ctx := context.Background()
	p, err := postgres.Open(ctx, pgtest.DSN(b), store.Options{})
	if err != nil {
		b.Fatalf("open postgres: %v", err)
	}
	b.Cleanup(func() { p.Close(context.Background()) })
	var next atomic.Int64
	res := store.Response{Digest: []byte("digest"), Status: 201, ContentType: "text/plain", Body: []byte("created")}
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
