package rate_test

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// On Redis as on PostgreSQL: two instances with leases, one key each
// hammers, one sliding-window limit. Busy hits cost a fraction of the
// round trips, nothing is served past the limit, and once both close the
// store holds exactly what they served.
func TestLeaseOnRedis(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	const limit, perInstance, lease = 200, 400, 32
	opt := rate.Options{Name: "lease", Lease: lease, Algorithm: rate.SlidingWindow}
	open := func(opt rate.Options) (*redis.Store, *rate.Limiter) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := redis.Open(ctx, c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
		if err != nil {
			t.Fatalf("open redis: %v", err)
		}
		return st, limiterOn(t, st, limit, time.Hour, opt)
	}
	sa, a := open(opt)
	_, b := open(opt)
	_, peek := open(rate.Options{Name: opt.Name, Algorithm: opt.Algorithm})

	before := sa.Stats().Writes
	for range 100 {
		if v, err := a.Allow(context.Background(), "ann"); err != nil || !v.Allowed {
			t.Fatalf("got %+v, %v; want allowed", v, err)
		}
	}
	if w := sa.Stats().Writes - before; w > 20 {
		t.Fatalf("100 sequential hits cost %d round trips, want a few with a lease of %d", w, lease)
	}
	served := 100 + allowAtOnce(t, []*rate.Limiter{a, b}, perInstance, "ann")
	if got := served; got > limit || got < limit-2*lease {
		t.Fatalf("served %d, want at most the limit of %d and at least %d", got, limit, limit-2*lease)
	}
	closeLimiter(t, a)
	closeLimiter(t, b)
	if got := stored(t, peek, limit, "ann"); got != served {
		t.Fatalf("after Close the store holds %d, want the %d served", got, served)
	}
}
