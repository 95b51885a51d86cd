package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// Close truncates the WAL: a stopped store leaves no log to replay.
func TestCheckpointerKeepsTheWALInCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * checkpointEvery {
		done := make(chan error, 1)
		c := driver.Counter{Key: "k" + strconv.Itoa(i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
		if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err == nil && fi.Size() != 0 {
		t.Fatalf("WAL is %d bytes after Close, want truncated", fi.Size())
	}
}
