package inflight_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// Two slots of one principal are taken; a third is refused until one is
// given back.
func ExampleLimiter_Acquire() {
	ctx := context.Background()
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(ctx)
	st, _ := memory.Open()
	defer st.Close(ctx)
	lim := inflight.New(pool, st, 2, inflight.Options{Name: "exports"})
	defer lim.Close(ctx)

	first, _ := lim.Acquire(ctx, "alice")
	second, _ := lim.Acquire(ctx, "alice")
	_, err := lim.Acquire(ctx, "alice")
	fmt.Println(errors.Is(err, inflight.ErrLimited))
	first()
	third, err := lim.Acquire(ctx, "alice")
	fmt.Println(err)
	second()
	third()
	// Output:
	// true
	// <nil>
}
