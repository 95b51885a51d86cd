package rate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// Two limiters of one Name on one store write the same rows: a 5/min and a
// 50/h limiter shared a row, and after a restart the hourly one had
// forgotten its hits. New refuses the second unless the policies match.
func TestOneNameOnePolicy(t *testing.T) {
	type limiter struct {
		name   string
		limit  int
		window time.Duration
	}
	tests := []struct {
		name        string
		first       limiter
		second      limiter
		closeFirst  bool
		wantRefused bool
	}{
		{"default names, other policies", limiter{"", 5, time.Minute}, limiter{"", 50, time.Hour}, false, true},
		{"other limit", limiter{"api", 5, time.Minute}, limiter{"api", 6, time.Minute}, false, true},
		{"other window", limiter{"api", 5, time.Minute}, limiter{"api", 5, time.Hour}, false, true},
		// On SQLite each limiter counts in its own memory: two of one
		// name would count apart and overwrite each other's rows.
		{"the same policy", limiter{"api", 5, time.Minute}, limiter{"api", 5, time.Minute}, false, true},
		{"other names", limiter{"minute", 5, time.Minute}, limiter{"hour", 50, time.Hour}, false, false},
		{"the first closed", limiter{"", 5, time.Minute}, limiter{"", 50, time.Hour}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := newRig(t, tt.first.limit, tt.first.window, rigOptions{rate: rate.Options{Name: tt.first.name}})
			if tt.closeFirst {
				if err := first.lim.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			_, err := rate.New(first.pool, first.st, tt.second.limit, tt.second.window, rate.Options{Name: tt.second.name})
			if refused := errors.Is(err, store.ErrPolicyConflict); refused != tt.wantRefused {
				t.Fatalf("second limiter: got error %v, want refused = %v", err, tt.wantRefused)
			}
			if err != nil && !tt.wantRefused {
				t.Fatal(err)
			}
		})
	}
}

// A policy changed across a restart (a deploy) keeps the open windows'
// counts: the new limit applies to them, and each closes at its old end or
// one new window after the restart, whichever is sooner. Before, a window
// of another length was dropped at load, and its client started afresh.
func TestPolicyChangeAcrossRestart(t *testing.T) {
	tests := []struct {
		name                  string
		oldLimit, newLimit    int
		oldWindow, newWindow  time.Duration
		hits                  int
		downtime              time.Duration
		wantLimitedFor        time.Duration // after the restart
		wantAllowedAfterStart bool
	}{
		{"limit lowered", 5, 2, time.Hour, time.Hour, 3, 10 * time.Second, time.Hour - 10*time.Second, false},
		{"limit raised", 2, 5, time.Hour, time.Hour, 2, 10 * time.Second, 0, true},
		{"window shortened", 2, 2, time.Hour, time.Minute, 2, 10 * time.Second, time.Minute, false},
		{"window lengthened", 2, 2, time.Minute, time.Hour, 2, 10 * time.Second, 50 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := newRig(t, tt.oldLimit, tt.oldWindow, rigOptions{})
			for range tt.hits {
				if v := first.allow(t, "alice"); !v.Allowed {
					t.Fatal("refused within the old limit")
				}
			}
			if err := first.lim.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			first.stop(t)

			clock := porchtest.NewFakeClock(t0.Add(tt.downtime))
			second := newRig(t, tt.newLimit, tt.newWindow, rigOptions{path: first.path, clock: clock})
			if tt.wantAllowedAfterStart {
				v := second.allow(t, "alice")
				if want := int64(tt.newLimit - tt.hits - 1); !v.Allowed || v.Remaining != want {
					t.Fatalf("after the restart: got %+v, want allowed with %d remaining (the old hits kept)", v, want)
				}
				return
			}
			if v := second.allow(t, "alice"); v.Allowed {
				t.Fatal("after the restart: allowed, want the open window's hits kept")
			}
			clock.Advance(tt.wantLimitedFor - time.Millisecond)
			if v := second.allow(t, "alice"); v.Allowed {
				t.Fatalf("%s after the restart: allowed, want still limited", tt.wantLimitedFor-time.Millisecond)
			}
			clock.Advance(time.Millisecond)
			if v := second.allow(t, "alice"); !v.Allowed {
				t.Fatalf("%s after the restart: refused, want the window closed", tt.wantLimitedFor)
			}
		})
	}
}
