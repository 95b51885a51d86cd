package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

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
