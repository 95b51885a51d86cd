package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// harness runs the suite on c: each test's database is a fresh key
// prefix, every store opened on it shares c.
func harness(c goredis.UniversalClient) storetest.Harness {
	return storetest.Harness{
		DB: func(t *testing.T) string { return redistest.Prefix(t, c) },
		Open: func(t *testing.T, prefix string) driver.Counters {
			st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
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
	t.Run("HashTag", func(t *testing.T) { testHashTag(t, c) })
	storetest.TestCounters(t, harness(c))
}

// Two limiters' keys for one principal share a hash slot, so a rate.All
// keyed by it counts on one node; other principals spread over the slots.
func testHashTag(t *testing.T, c *goredis.ClusterClient) {
	ctx := context.Background()
	st, err := redis.Open(ctx, c, redis.Options{Prefix: redistest.Prefix(t, c), Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	slot := func(key string) int64 {
		t.Helper()
		n, err := c.ClusterKeySlot(ctx, st.CounterKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	slots := map[int64]bool{}
	for _, p := range []string{"p:alice", "p:bob", "ip:10.0.0.1", "p:{evil}", "p:\x00\xff"} {
		a, b := slot("rate:wide:"+p), slot("rate:narrow:"+p)
		if a != b {
			t.Errorf("%s: limiters wide and narrow land in slots %d and %d, want one", p, a, b)
		}
		slots[a] = true
	}
	if len(slots) < 3 {
		t.Errorf("five principals in %d slots: the tag does not depend on the principal", len(slots))
	}
}

// Redis's in-flight slots pass the drivers' slots suite, on one server.
func TestSlotsConformance(t *testing.T) {
	c := redistest.Client(t)
	storetest.TestSlots(t, storetest.SlotsHarness{
		DB: func(t *testing.T) string { return redistest.Prefix(t, c) },
		Open: func(t *testing.T, prefix string) driver.SharedSlots {
			st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	})
}
