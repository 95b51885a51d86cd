package rate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// layers names the countings of l from the front: the layers New put in
// front of the store's own counting, and that one last.
func layers(l *Limiter) string {
	var names []string
	for c := l.counting; c != nil; {
		names = append(names, strings.TrimPrefix(fmt.Sprintf("%T", c), "*rate."))
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

// New puts in front of a shared store's counting only the layers its
// options ask for, the refusal cache in front of the leases, so that a
// limiter without them pays for neither on its hits.
func TestSharedCountingLayers(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"bare", Options{RefusalCacheFor: -1}, "shared"},
		{"refusal cache by default", Options{}, "refusals > shared"},
		{"leases alone", Options{RefusalCacheFor: -1, Lease: 8}, "leases > shared"},
		{"both", Options{Lease: 8}, "refusals > leases > shared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := porch.NewPool(porch.PoolOptions{Size: 1})
			t.Cleanup(func() { pool.Close(context.Background()) })
			l, err := New(pool, &refusingStore{}, 1, time.Hour, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			if got := layers(l); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
