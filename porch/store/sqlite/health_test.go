package sqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func TestHealthAfterClose(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	closeStore(t, s)
	if err := s.Health(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("got Health() = %v after Close, want ErrClosed", err)
	}
}
