package redis_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// What the replica acknowledgement costs: requests decided per second by
// a rate.Limiter on a primary with one replica, without and with
// Options.Replicas 1: from 32 concurrent callers per CPU (so that the
// group committer batches them, and each batch waits once), and from one
// caller (each request waits a whole round trip to the replica).
//
//	go test -run '^$' -bench ReplicaAck -benchtime 5s ./porch/store/redis/
func BenchmarkReplicaAck(b *testing.B) {
	primary := redistest.StartServer(b)
	redistest.StartReplica(b, primary)
	for _, tt := range []struct {
		replicas, callers int // callers per CPU
	}{{0, 32}, {1, 32}, {0, 0}, {1, 0}} {
		name := "replicas=" + strconv.Itoa(tt.replicas) + "/callers=" + strconv.Itoa(tt.callers) + "xCPU"
		if tt.callers == 0 {
			name = "replicas=" + strconv.Itoa(tt.replicas) + "/one-caller"
		}
		b.Run(name, func(b *testing.B) {
			replicas := tt.replicas
			c := goredis.NewClient(&goredis.Options{Addr: primary.Addr})
			defer c.Close()
			st, err := redis.Open(context.Background(), c, redis.Options{Prefix: "bench:" + name + ":", Replicas: replicas,
				Options: store.Options{Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close(context.Background())
			pool := porch.NewPool(porch.PoolOptions{})
			defer pool.Close(context.Background())
			l, err := rate.New(pool, st, 1<<40, time.Hour, rate.Options{Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close(context.Background())
			var n atomic.Int64
			b.ResetTimer()
			began := time.Now()
			if tt.callers == 0 {
				for range b.N {
					if _, err := l.Allow(context.Background(), "client"); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "req/s")
				return
			}
			b.SetParallelism(tt.callers)
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.FormatInt(n.Add(1), 10)
				for pb.Next() {
					if _, err := l.Allow(context.Background(), "client"+id); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "req/s")
		})
	}
}
