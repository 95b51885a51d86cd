package rate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A login form allows 3 failed attempts per user per 15 minutes. A failed
// attempt is counted; a successful login clears the user's failures, so
// that the next time they mistype they have all 3 again.
func ExampleLimiter_Reset() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	failures, err := k.Limiter(3, 15*time.Minute, rate.Options{Name: "login-failures"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	login := func(user, password string) string {
		// Peek: a user over the limit is refused before the password is
		// checked, and checking does not count.
		if v, err := failures.Peek(ctx, user); err != nil || !v.Allowed {
			return "locked out"
		}
		if password != "hunter2" {
			if _, err := failures.Allow(ctx, user); err != nil {
				return "try later"
			}
			return "wrong password"
		}
		if err := failures.Reset(ctx, user); err != nil {
			return "try later"
		}
		return "welcome"
	}

	for _, pw := range []string{"hunter1", "hunter3", "hunter2", "hunter4", "hunter5", "hunter6", "hunter2"} {
		fmt.Println(pw, login("ann", pw))
	}
	// Output:
	// hunter1 wrong password
	// hunter3 wrong password
	// hunter2 welcome
	// hunter4 wrong password
	// hunter5 wrong password
	// hunter6 wrong password
	// hunter2 locked out
}

func ExampleLimiter_Peek() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order
	lim, err := k.Limiter(10, time.Minute, rate.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		lim.Allow(ctx, "user42")
	}
	v, _ := lim.Peek(ctx, "user42")
	fmt.Println(v.Allowed, v.Remaining, "of", v.Limit)
	// Output: true 6 of 10
}
