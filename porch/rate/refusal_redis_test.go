package rate_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// openRedis opens a limiter on the Redis store, on keys of its own.
func openRedis(t testing.TB, limit int, window time.Duration, opt rate.Options) (*redis.Store, *rate.Limiter) {
	t.Helper()
	c := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := redis.Open(ctx, c, redis.Options{Prefix: redistest.Prefix(t, c), Timeout: redistest.StoreTimeout})
	if err != nil {
		t.Fatalf("open redis: %v", err)
	}
	return st, limiterOn(t, st, limit, window, opt)
}

// On Redis as on PostgreSQL, a refused key's later requests are refused
// from the cache, with no round trip, until it can expire.
func TestRefusalCacheSavesRoundTripsRedis(t *testing.T) {
	st, lim := openRedis(t, 1, time.Hour, rate.Options{Name: "flood", KeyFunc: byUser})
	refuse(t, lim, "mallory")
	h := lim.Handler(&counted{})
	before := st.Stats()
	for range 200 {
		if res, _ := serve(h, attempt("mallory", false)); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("got %d, want 429", res.StatusCode)
		}
	}
	if w := st.Stats().Writes - before.Writes; w > 2 {
		t.Errorf("200 refused requests of a refused key cost %d store round trips, want at most a couple (the cache's life is 1s)", w)
	}
}

// A refused client's flood on Redis: store round trips per refused request
// with the local refusal cache off and on.
func BenchmarkRefusedFloodRedis(b *testing.B) {
	for _, c := range []struct {
		name string
		for_ time.Duration
	}{{"cache=off", -1}, {"cache=on", 0}} {
		b.Run(c.name, func(b *testing.B) {
			st, lim := openRedis(b, 1, time.Hour, rate.Options{Name: "bench-" + c.name[6:], KeyFunc: byUser, RefusalCacheFor: c.for_})
			refuse(b, lim, "mallory")
			h := lim.Handler(&counted{})
			before := st.Stats()
			for b.Loop() {
				if res, _ := serve(h, attempt("mallory", false)); res.StatusCode != http.StatusTooManyRequests {
					b.Fatalf("got %d, want 429", res.StatusCode)
				}
			}
			after := st.Stats()
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(b.N), "writes/op")
			b.ReportMetric(float64(after.Commits-before.Commits)/float64(b.N), "commits/op")
		})
	}
}
