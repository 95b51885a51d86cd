package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Inspect and Forget refuse a key an owner holds (store.ErrKeyHeld), and
// Forget's deletion is durable once it returns: the reopened file has no
// row.
func TestInspectAndForget(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	s := openSQLite(t, path, sqlite.Options{})
	hold, err := s.Reserve(ctx, "k")
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if _, _, err := s.Inspect(ctx, "k"); !errors.Is(err, store.ErrKeyHeld) {
		t.Errorf("inspect a held key: got %v, want ErrKeyHeld", err)
	}
	if err := s.Forget(ctx, "k"); !errors.Is(err, store.ErrKeyHeld) {
		t.Errorf("forget a held key: got %v, want ErrKeyHeld", err)
	}
	if err := hold.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("ok")}, time.Hour); err != nil {
		t.Fatalf("save: %v", err)
	}
	res, ok, err := s.Inspect(ctx, "k")
	if err != nil || !ok || res.Status != 201 {
		t.Fatalf("inspect: got %+v %v %v, want the stored 201", res, ok, err)
	}
	if err := s.Forget(ctx, "k"); err != nil {
		t.Fatalf("forget: %v", err)
	}
	closeStore(t, s)
	s = openSQLite(t, path, sqlite.Options{})
	if n := countRows(t, s.DB(), `SELECT count(*) FROM porch_idem_responses`); n != 0 {
		t.Errorf("rows after forget and reopen: got %d, want 0", n)
	}
	if _, ok, err := s.Inspect(ctx, "k"); ok || err != nil {
		t.Errorf("inspect after forget: got %v %v, want nothing", ok, err)
	}
}
