package count

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// layers names the countings of c from the front: the layers NewShared
// put in front of the store's own counting, and that one last.
func layers(c Counter) string {
	var names []string
	for c != nil {
		names = append(names, strings.TrimPrefix(fmt.Sprintf("%T", c), "*count."))
		switch w := c.(type) {
		case *refusals:
			c = w.next
		case *leases:
			c = w.next
		default:
			c = nil
		}
	}
	return strings.Join(names, " > ")
}

// NewShared puts in front of a shared store's counting only the layers
// it is asked for, the refusal cache in front of the leases, so that a
// limiter without them pays for neither on its hits.
func TestSharedCountingLayers(t *testing.T) {
	tests := []struct {
		name       string
		lease      int64
		refusalFor time.Duration
		want       string
	}{
		{"bare", 0, -1, "shared"},
		{"no refusal cache for a zero life", 0, 0, "shared"},
		{"refusal cache", 0, time.Second, "refusals > shared"},
		{"leases alone", 8, -1, "leases > shared"},
		{"both", 8, time.Second, "refusals > leases > shared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newPool(t, 1)
			e := open(t, pool, NewShared(testConfig(t, pool, 1, time.Hour), &refusingStore{}, tt.lease, tt.refusalFor))
			t.Cleanup(func() { e.Close(context.Background()) })
			if got := layers(e.c); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
