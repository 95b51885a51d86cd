package sqlite_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Load skips the read for a key that has no row (see storedKeys), so the
// set it checks must hold every key with a row: the ones saved in this
// process and the ones stored before it opened the file.
func TestLoadFindsResponsesSavedBeforeAndAfterOpen(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	clock := fakeClock()
	res := driver.Response{Digest: []byte{1}, Status: 201, ContentType: "text/plain", Body: []byte("made")}
	save := func(s interface {
		Reserve(context.Context, string) (driver.Reservation, error)
	}, key string) {
		t.Helper()
		hold, err := s.Reserve(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := hold.Load(ctx); ok || err != nil {
			t.Fatalf("%s: Load before Save = (%v, %v), want a miss", key, ok, err)
		}
		if err := hold.Save(ctx, res, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	found := func(s interface {
		Reserve(context.Context, string) (driver.Reservation, error)
	}, key string) bool {
		t.Helper()
		hold, err := s.Reserve(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Release()
		_, ok, err := hold.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: clock}})
	for i := range 3000 { // past a shard's first sweep
		save(s, "before:"+strconv.Itoa(i))
	}
	if !found(s, "before:7") {
		t.Error("a key saved in this process: Load missed it")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: clock}})
	for i := range 3000 {
		if !found(s, "before:"+strconv.Itoa(i)) {
			t.Fatalf("before:%d, stored before the store opened: Load missed it", i)
		}
	}
	save(s, "after")
	if !found(s, "after") {
		t.Error("a key saved after open: Load missed it")
	}
	if found(s, "never") {
		t.Error("a key never saved: Load found it")
	}
}
