// Command badkeys measures issue 15 item 1 on PostgreSQL: 300 concurrent
// Allow calls through one limiter, 10 of them with a bad key, and how many
// of the 290 good ones failed. Run from the repository root:
//
//	PORCH_TEST_POSTGRES='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./internal/tools/badkeys
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/internal/pgschema"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

func main() {
	ctx := context.Background()
	long := make([]byte, 5<<10)
	rand.Read(long)
	kinds := []struct{ name, key string }{
		{"0xFF", "\xff"},
		{"NUL", "a\x00b"},
		{"10 KB", hex.EncodeToString(long)},
	}
	for _, kind := range kinds {
		dsn, drop, err := pgschema.Fresh(ctx, os.Getenv("PORCH_TEST_POSTGRES"), "porch_badkeys_")
		if err != nil {
			log.Fatal(err)
		}
		st, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			log.Fatal(err)
		}
		pool := porch.NewPool(porch.PoolOptions{})
		lim, err := rate.New(pool, st, 1000, time.Hour, rate.Options{})
		if err != nil {
			log.Fatal(err)
		}
		var goodErr, badErr atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key, bad := "client-"+strconv.Itoa(i), i%30 == 0 // 10 of 300
				if bad {
					key = kind.key + strconv.Itoa(i)
				}
				if _, err := lim.Allow(ctx, key); err != nil {
					if bad {
						badErr.Add(1)
					} else {
						goodErr.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		fmt.Printf("%-6s bad keys: %3d of 290 good calls failed, %2d of 10 bad calls failed\n", kind.name, goodErr.Load(), badErr.Load())
		pool.Close(ctx)
		st.Close(ctx)
		drop(ctx)
	}
}
