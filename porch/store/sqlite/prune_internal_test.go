package sqlite

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// The committer prunes responses only once one can have expired, and after
// a prune that emptied what was due it waits for the next expiry instead of
// pruning in every commit again.
func TestResponsesPruneWaitsForTheNextExpiry(t *testing.T) {
	ctx := context.Background()
	clock := porchtest.NewFakeClock(journalWall)
	s, err := Open(filepath.Join(t.TempDir(), "porch.db"), Options{Options: store.Options{Clock: clock, PruneRows: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if s.responsesDue != math.MaxInt64 {
		t.Fatalf("a new store: got responsesDue %d, want none (MaxInt64)", s.responsesDue)
	}
	saveResponse := func(key string, ttl time.Duration) {
		t.Helper()
		hold, err := s.Reserve(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := hold.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		saveResponse(fmt.Sprintf("k%d", i), time.Minute)
	}
	if want := s.Now().Add(time.Minute).UnixMilli(); s.responsesDue != want {
		t.Fatalf("after three saves: got responsesDue %d, want %d", s.responsesDue, want)
	}
	clock.Advance(2 * time.Minute)
	save(t, s, driver.Counter{Key: "c", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute}) // a commit: the prune runs
	if n := tableCount(t, s, `SELECT count(*) FROM porch_idem_responses`); n != 0 {
		t.Fatalf("after the prune: %d responses left, want 0", n)
	}
	if s.responsesDue != math.MaxInt64 {
		t.Errorf("after a prune that emptied the table: got responsesDue %d, want none: else every commit prunes again", s.responsesDue)
	}
	saveResponse("later", time.Hour)
	if want := s.Now().Add(time.Hour).UnixMilli(); s.responsesDue != want {
		t.Errorf("after a save: got responsesDue %d, want %d", s.responsesDue, want)
	}
}
