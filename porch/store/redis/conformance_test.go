package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// harness runs the suite on c: each test's database is a fresh key
// prefix, every store opened on it shares c.
func harness(c goredis.UniversalClient) storetest.Harness {
	return storetest.Harness{
		DB: func(t *testing.T) string { return redistest.Prefix(t, c) },
		Open: func(t *testing.T, prefix string) store.Counters {
			st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

// The conformance suite on one server (PORCH_TEST_REDIS, or the local one).
func TestConformance(t *testing.T) {
	storetest.TestCounters(t, harness(redistest.Client(t)))
}

// The conformance suite on a three-node Redis Cluster of its own.
func TestConformanceCluster(t *testing.T) {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.StartCluster(t, 3)})
	t.Cleanup(func() { c.Close() })
	storetest.TestCounters(t, harness(c))
}
