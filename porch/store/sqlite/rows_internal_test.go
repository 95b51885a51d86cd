package sqlite

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Runs of plain responses are written together on the driver's connection
// (responseRows), the rest of the batch op by op: the batch's order must
// hold across both, so that a Forget queued between two saves of a key
// deletes the first and not the second, and one queued after both deletes
// the key.
func TestResponseRunsKeepBatchOrder(t *testing.T) {
	s := openInternal(t, filepath.Join(t.TempDir(), "porch.db"))
	t.Cleanup(func() { s.Close(context.Background()) })
	now := s.Now()
	save := func(key, body string) commit.Op {
		return commit.Op{Response: &driver.Response{Key: key, Digest: []byte{1}, Status: 200, Body: []byte(body),
			Created: now, Expires: now.Add(time.Hour)}}
	}
	forget := func(key string) commit.Op {
		return commit.Op{Delete: &commit.Deletion{Key: key, Now: math.MaxInt64}}
	}
	batch := []commit.Op{
		save("a", "a1"), save("b", "b1"), forget("a"), save("c", "c1"), save("a", "a2"),
		save("d", "d1"), save("d", "d2"), forget("d"),
	}
	if err := s.writeBatch(batch); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"a": "a2", "b": "b1", "c": "c1", "d": ""} {
		res, ok, err := s.loadResponse(context.Background(), key)
		switch {
		case err != nil:
			t.Fatalf("%s: %v", key, err)
		case want == "" && ok:
			t.Errorf("%s: stored %q, want it deleted by the Forget queued after its saves", key, res.Body)
		case want != "" && (!ok || string(res.Body) != want):
			t.Errorf("%s: stored %v %q, want %q", key, ok, res.Body, want)
		}
	}
}
