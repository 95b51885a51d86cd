package rate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/rate"
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

// sharedOpeners open limiters of one policy, windows of window, on one
// fresh shared store each: PostgreSQL and Redis.
func sharedOpeners(window time.Duration) map[string]func(t *testing.T) func(limit int, opt rate.Options) *rate.Limiter {
	return map[string]func(t *testing.T) func(int, rate.Options) *rate.Limiter{
		"postgres": func(t *testing.T) func(int, rate.Options) *rate.Limiter {
			dsn := pgtest.DSN(t)
			return func(limit int, opt rate.Options) *rate.Limiter {
				_, lim := openShared(t, dsn, limit, window, opt)
				return lim
			}
		},
		"redis": func(t *testing.T) func(int, rate.Options) *rate.Limiter {
			c := redistest.Client(t)
			prefix := redistest.Prefix(t, c)
			return func(limit int, opt rate.Options) *rate.Limiter {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				st, err := redis.Open(ctx, c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
				if err != nil {
					t.Fatalf("open redis: %v", err)
				}
				return limiterOn(t, st, limit, window, opt)
			}
		},
	}
}

// A Reset on one instance while another holds a lease starts a window
// that never serves past the limit: hits the lease counted before the
// reset are counted in the new window until they are given back.
func TestResetWhileAnotherInstanceLeasesKeepsLimit(t *testing.T) {
	const limit = 400
	for name, openStore := range sharedOpeners(time.Minute) {
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
// kept them counted only while they could still be answered. 100
// sequential hits leave b's lease holding some unanswered.
func TestLeaseGivenBackAfterAnotherInstanceResets(t *testing.T) {
	const limit, lease = 400, 128
	ctx := context.Background()
	for name, openStore := range sharedOpeners(time.Minute) {
		t.Run(name, func(t *testing.T) {
			open := openStore(t)
			opt := rate.Options{Name: "reset-giveback", Lease: lease}
			a, b := open(limit, opt), open(limit, opt)
			peek := open(limit, rate.Options{Name: opt.Name})
			// The sweeper gives an idle key's lease back after LeaseIdle: a
			// reading later than that says nothing, and a new key tries
			// again, until one is quick enough. A loaded machine (-race
			// beside busy loops) took longer than LeaseIdle five tries in a
			// row, so the tries are bounded by a generous deadline rather
			// than counted.
			var principal string
			var carried int64
			deadline := time.Now().Add(60 * time.Second)
			for try := 1; ; try++ {
				principal = fmt.Sprintf("ann%d", try)
				for i := range 100 {
					if v, err := b.Allow(ctx, principal); err != nil || !v.Allowed {
						t.Fatalf("Allow %d: got %+v, %v; want allowed", i+1, v, err)
					}
				}
				last := time.Now()
				if err := a.Reset(ctx, principal); err != nil {
					t.Fatalf("Reset: %v", err)
				}
				// The reset counts what b's lease holds: its tokens, and
				// the hits it answered since its last trip reported them.
				carried = stored(t, peek, limit, principal)
				if time.Since(last) < rate.LeaseIdle*9/10 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d tries in 60s each took longer than LeaseIdle (%s) from the last hit to reading the store", try, rate.LeaseIdle)
				}
			}
			if carried <= 0 || carried > lease {
				t.Fatalf("after the reset the store counts %d, want b's held hits, 1 to a lease (%d)", carried, lease)
			}
			// Given back (by Close, or by the sweeper), the tokens come
			// out again; the answered hits stay counted.
			closeLimiter(t, b)
			if got := stored(t, peek, limit, principal); got >= carried {
				t.Fatalf("after b gave its lease back the store counts %d, want less than the %d the reset carried", got, carried)
			}
		})
	}
}
