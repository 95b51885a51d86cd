package rate_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// storeKind opens one driver's store for a test: exclusive (SQLite,
// memory) or shared (PostgreSQL, Redis).
type storeKind struct {
	name   string
	shared bool
	open   func(t *testing.T) driver.Counters
}

var storeKinds = []storeKind{
	{"sqlite", false, func(t *testing.T) driver.Counters {
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"memory", false, func(t *testing.T) driver.Counters {
		st, err := memory.Open()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"postgres", true, func(t *testing.T) driver.Counters {
		st, err := postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"redis", true, func(t *testing.T) driver.Counters {
		c := redistest.Client(t)
		st, err := redis.Open(context.Background(), c, redis.Options{Prefix: redistest.Prefix(t, c), Timeout: redistest.StoreTimeout})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// An option that only one kind of store honours is refused, at New and
// before any I/O, on the other kind, whatever its sign: a limiter never
// runs with an option it would ignore. Zero means "not set" and is taken
// by every store.
func TestNewRefusesOptionsTheStoreWouldIgnore(t *testing.T) {
	cases := []struct {
		name      string
		opt       rate.Options
		forShared bool   // the kind that honours it
		wantPanic string // a part of the message on the other kind
	}{
		{"Lease", rate.Options{Lease: 8}, true, "Options.Lease only with a shared store"},
		{"RefusalCacheFor", rate.Options{RefusalCacheFor: time.Minute}, true, "Options.RefusalCacheFor only with a shared store"},
		{"RefusalCacheFor negative", rate.Options{RefusalCacheFor: -1}, true, "Options.RefusalCacheFor only with a shared store"},
		{"WriteAhead", rate.Options{WriteAhead: 16}, false, "Options.WriteAhead only with a store that is its counters' only writer"},
		{"WriteAhead negative", rate.Options{WriteAhead: -1}, false, "Options.WriteAhead only with a store that is its counters' only writer"},
	}
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			st := k.open(t)
			pool := porch.NewPool(porch.PoolOptions{Size: 1})
			t.Cleanup(func() {
				pool.Close(context.Background())
				st.Close(context.Background())
			})
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					opt := c.opt
					opt.Name = "kind-" + strings.ReplaceAll(strings.ToLower(c.name), " ", "-")
					if c.forShared == k.shared {
						lim, err := rate.New(pool, st, 10, time.Minute, opt)
						if err != nil {
							t.Fatalf("case %d on %s: got %v, want a limiter", i, k.name, err)
						}
						lim.Close(context.Background())
						return
					}
					defer func() {
						msg, _ := recover().(string)
						if !strings.HasPrefix(msg, "rate: ") || !strings.Contains(msg, c.wantPanic) {
							t.Errorf("got panic %q, want one prefixed %q that says %q", msg, "rate: ", c.wantPanic)
						}
						// The panic came before New claimed the Name's
						// policy: another policy under it is not refused.
						lim, err := rate.New(pool, st, 99, time.Hour, rate.Options{Name: opt.Name})
						if err != nil {
							t.Fatalf("after the panic: got %v, want no policy claimed", err)
						}
						lim.Close(context.Background())
					}()
					rate.New(pool, st, 10, time.Minute, opt) //nolint:errcheck // it panics
				})
			}
			// Zero is every option unset, which every store takes.
			lim, err := rate.New(pool, st, 10, time.Minute, rate.Options{Name: "kind-zero"})
			if err != nil {
				t.Fatalf("zero Options on %s: got %v, want a limiter", k.name, err)
			}
			lim.Close(context.Background())
		})
	}
}
