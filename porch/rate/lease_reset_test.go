package rate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// resetUnderLease has b take a lease on a key (100 quick hits), a reset
// the key, and then both serve it as fast as they can: what they serve
// after the reset is counted in its new window, whatever b's lease held
// from before it.
func resetUnderLease(t *testing.T, a, b *rate.Limiter) int64 {
	t.Helper()
	ctx := context.Background()
	for i := range 100 {
		if v, err := b.Allow(ctx, "ann"); err != nil || !v.Allowed {
			t.Fatalf("Allow %d before the reset: got %+v, %v; want allowed", i+1, v, err)
		}
	}
	if err := a.Reset(ctx, "ann"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	served := allowAtOnce(t, []*rate.Limiter{a, b}, 600, "ann")
	t.Logf("served %d after the reset", served)
	return served
}

// checkServedAfterReset: never past the limit; without leases exactly the
// limit (the reset left nothing counted); with them, short of it by at
// most what the leases held (the reset's carried hits, and what each
// instance held unanswered when the hammer stopped).
func checkServedAfterReset(t *testing.T, served int64, limit, lease int) {
	t.Helper()
	low := int64(limit - 3*lease)
	if served > int64(limit) || served < low {
		t.Fatalf("served %d after the reset, want %d to %d", served, low, limit)
	}
}

// A Reset on one instance while another holds a lease starts a window
// that never serves past the limit: hits the lease counted before the
// reset are counted in the new window until they are given back.
func TestResetWhileAnotherInstanceLeasesKeepsLimit(t *testing.T) {
	const limit = 400
	for _, lease := range []int{128, 16, 0} {
		t.Run(fmt.Sprintf("postgres/lease=%d", lease), func(t *testing.T) {
			dsn := pgtest.DSN(t)
			opt := rate.Options{Name: "reset-lease", Lease: lease}
			_, a := openShared(t, dsn, limit, time.Minute, opt)
			_, b := openShared(t, dsn, limit, time.Minute, opt)
			checkServedAfterReset(t, resetUnderLease(t, a, b), limit, lease)
		})
		t.Run(fmt.Sprintf("redis/lease=%d", lease), func(t *testing.T) {
			c := redistest.Client(t)
			prefix := redistest.Prefix(t, c)
			opt := rate.Options{Name: "reset-lease", Lease: lease}
			open := func() *rate.Limiter {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				st, err := redis.Open(ctx, c, redis.Options{Prefix: prefix, Options: store.Options{}})
				if err != nil {
					t.Fatalf("open redis: %v", err)
				}
				return limiterOn(t, st, limit, time.Minute, opt)
			}
			a, b := open(), open()
			checkServedAfterReset(t, resetUnderLease(t, a, b), limit, lease)
		})
	}
}
