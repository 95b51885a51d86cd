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
