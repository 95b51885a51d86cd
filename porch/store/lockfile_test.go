//go:build unix

package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/writeonce/writeonce/porch/store"
)

// A second opener of the same file would be a second writer of its counters
// and double every limit; it is refused until the first closes.
func TestOpenSQLiteRefusesASecondOpener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	first, err := store.OpenSQLite(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenSQLite(path, store.Options{}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second OpenSQLite: err = %v, want ErrLocked", err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := store.OpenSQLite(path, store.Options{})
	if err != nil {
		t.Fatalf("OpenSQLite after Close: %v", err)
	}
	again.Close(context.Background())
}
