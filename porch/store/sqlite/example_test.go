package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "porch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	clock := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))

	s, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Clock: clock}})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	c := driver.Counter{Key: "rate:default:ip:192.0.2.1", State: driver.State{Start: s.Now(), Count: 3}, Window: time.Minute}
	if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
		panic(err)
	}
	fmt.Println("committed:", <-done == nil) // done runs once the row is durable
	s.Close(context.Background())

	// Reopened, the store hands back the windows that are still open.
	s, err = sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Clock: clock}})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())
	s.LoadCounters(context.Background(), s.Now(), func(c driver.Counter) {
		fmt.Println(c.Key, c.Count, c.End().Format(time.TimeOnly))
	})
	// Output:
	// committed: true
	// rate:default:ip:192.0.2.1 3 12:01:00
}
