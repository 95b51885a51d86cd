package rate_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// On PostgreSQL, a refused client costs the database one round trip per
// RefusalCacheFor, however hard it hammers: this instance answers its
// later requests from memory until the store would allow again, or the
// bound passes. (Compiled only: it needs a database.)
func ExampleOptions_refusalCacheFor() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), postgres.Options{})
	if err != nil {
		panic(err)
	}
	k := kit.New(porch.NewPool(porch.PoolOptions{}), st, st) // New, not Open: st is kept for its Stats
	defer k.Close(ctx)
	lim, err := k.Limiter(1, time.Hour, rate.Options{
		// A Reset on another instance is honoured here within 500ms; one
		// on this instance at once. Negative: ask the database every time.
		RefusalCacheFor: 500 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}

	lim.Allow(ctx, "mallory") // allowed
	lim.Allow(ctx, "mallory") // refused by the database
	before := st.Stats().Writes
	for range 1000 {
		v, _ := lim.Allow(ctx, "mallory") // refused from memory
		_ = v.RetryAt                     // the database's: Retry-After counts down to it
	}
	fmt.Println("writes for 1000 refusals:", st.Stats().Writes-before)
}
