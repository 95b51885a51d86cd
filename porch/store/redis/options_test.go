package redis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// Redis expires porch's keys itself, so there are no rows to prune: Open
// refuses a PruneRows it would ignore, of either sign, and says why.
func TestOpenRefusesPruneRows(t *testing.T) {
	c := redistest.Client(t)
	for _, rows := range []int{5, -1} {
		st, err := redis.Open(context.Background(), c, redis.Options{Prefix: redistest.Prefix(t, c), Options: store.Options{PruneRows: rows}})
		if err == nil {
			st.Close(context.Background())
			t.Fatalf("Open with PruneRows %d: got a store, want an error", rows)
		}
		if !strings.Contains(err.Error(), "PruneRows") || !strings.Contains(err.Error(), "expires") {
			t.Errorf("Open with PruneRows %d: got %q, want it to name PruneRows and say Redis expires keys itself", rows, err)
		}
	}
}

// A count is on the server once its reply arrives, which is what
// SurvivesProcessCrash asks; RequireDurable asks more, that it be on the
// server's disk, so the two together are a contradiction Open refuses
// rather than honour one of them silently. A Durability naming no level is
// refused too.
func TestOpenDurability(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix, Options: store.Options{Durability: store.SurvivesProcessCrash}})
	if err != nil {
		t.Fatalf("Open with SurvivesProcessCrash: %v", err)
	}
	st.Close(context.Background())
	for _, tc := range []struct {
		name     string
		opt      redis.Options
		mentions string
	}{
		{"SurvivesProcessCrash with RequireDurable", redis.Options{Prefix: prefix, RequireDurable: true,
			Options: store.Options{Durability: store.SurvivesProcessCrash}}, "RequireDurable"},
		{"an unknown level", redis.Options{Prefix: prefix, Options: store.Options{Durability: store.SurvivesProcessCrash + 1}}, "Durability"},
	} {
		st, err := redis.Open(context.Background(), c, tc.opt)
		if err == nil {
			st.Close(context.Background())
			t.Errorf("Open with %s: got a store, want an error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.mentions) {
			t.Errorf("Open with %s: got %q, want it to name %s", tc.name, err, tc.mentions)
		}
	}
}
