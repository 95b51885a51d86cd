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

// sharedOpeners open limiters of one policy on one fresh shared store:
// PostgreSQL and Redis.
func sharedOpeners(t *testing.T) map[string]func(t *testing.T) func(limit int, opt rate.Options) *rate.Limiter {
	return map[string]func(t *testing.T) func(int, rate.Options) *rate.Limiter{
		"postgres": func(t *testing.T) func(int, rate.Options) *rate.Limiter {
			dsn := pgtest.DSN(t)
			return func(limit int, opt rate.Options) *rate.Limiter {
				_, lim := openShared(t, dsn, limit, time.Minute, opt)
				return lim
			}
		},
		"redis": func(t *testing.T) func(int, rate.Options) *rate.Limiter {
			c := redistest.Client(t)
			prefix := redistest.Prefix(t, c)
			return func(limit int, opt rate.Options) *rate.Limiter {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				st, err := redis.Open(ctx, c, redis.Options{Prefix: prefix, Options: store.Options{}})
				if err != nil {
					t.Fatalf("open redis: %v", err)
				}
				return limiterOn(t, st, limit, time.Minute, opt)
			}
		},
	}
}

// A Reset on one instance while another holds a lease starts a window
// that never serves past the limit: hits the lease counted before the
// reset are counted in the new window until they are given back.
func TestResetWhileAnotherInstanceLeasesKeepsLimit(t *testing.T) {
	const limit = 400
	for name, openStore := range sharedOpeners(t) {
		for _, lease := range []int{128, 16, 0} {
			t.Run(fmt.Sprintf("%s/lease=%d", name, lease), func(t *testing.T) {
				open := openStore(t)
				opt := rate.Options{Name: "reset-lease", Lease: lease}
				a, b := open(limit, opt), open(limit, opt)
				checkServedAfterReset(t, resetUnderLease(t, a, b), limit, lease)
			})
		}
	}
}

// The hits a lease holds across another instance's Reset come out of the
// new window when the holder gives them back (here on Close): the reset
// kept them counted only while they could still be answered.
func TestLeaseGivenBackAfterAnotherInstanceResets(t *testing.T) {
	const limit, lease = 400, 128
	ctx := context.Background()
	for name, openStore := range sharedOpeners(t) {
		t.Run(name, func(t *testing.T) {
			open := openStore(t)
			opt := rate.Options{Name: "reset-giveback", Lease: lease}
			a, b := open(limit, opt), open(limit, opt)
			peek := open(limit, rate.Options{Name: opt.Name})
			for i := range 100 {
				if v, err := b.Allow(ctx, "ann"); err != nil || !v.Allowed {
					t.Fatalf("Allow %d: got %+v, %v; want allowed", i+1, v, err)
				}
			}
			if err := a.Reset(ctx, "ann"); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			carried := stored(t, peek, limit, "ann")
			// b's Peek adds the hits its lease holds to what the store has left.
			v, err := b.Peek(ctx, "ann")
			if err != nil {
				t.Fatal(err)
			}
			held := v.Remaining - (limit - carried)
			if held <= 0 || carried < held || carried > lease {
				t.Fatalf("after the reset the store counts %d and b's lease holds %d; want b's held hits counted, and no more than a lease", carried, held)
			}
			closeLimiter(t, b)
			if got, want := stored(t, peek, limit, "ann"), carried-held; got != want {
				t.Fatalf("after b gave its lease back the store counts %d, want %d (%d carried less %d given back)", got, want, carried, held)
			}
		})
	}
}
