package postgres

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// dbKey keeps short keys as they are, fits every key in maxRawKey+1
// bytes, and never maps two keys to one: not at the length where hashing
// starts, not for long keys that share everything but their tail.
func TestDBKeyIsInjectiveAndBounded(t *testing.T) {
	long := strings.Repeat("x", 10<<10)
	keys := []string{
		"", "\xff", "\x00", "a\x00",
		strings.Repeat("x", maxRawKey),
		strings.Repeat("x", maxRawKey+1),
		strings.Repeat("x", maxRawKey-1) + "\x01", // a raw key ending as a hashed one does
		long, long[:len(long)-1] + "y",
		long[:hashedPrefix] + "a", long[:hashedPrefix] + "b",
		long[:hashedPrefix+40] + "a", long[:hashedPrefix+40] + "b",
	}
	seen := make(map[string]string)
	for _, k := range keys {
		db := string(dbKey(k))
		if len(db) > maxRawKey+1 {
			t.Errorf("dbKey of a %d-byte key is %d bytes, want at most %d", len(k), len(db), maxRawKey+1)
		}
		if len(k) <= maxRawKey && db != k {
			t.Errorf("dbKey of a %d-byte key changed it", len(k))
		}
		if other, dup := seen[db]; dup {
			t.Errorf("keys of %d and %d bytes share dbKey %.30q", len(other), len(k), db)
		}
		seen[db] = k
	}
}

// A batch statement that fails for one key's row fails only that key's
// hits: here a weight that takes the stored count beyond bigint (a data
// exception, 22003) among other keys' hits, which all commit. Before, the
// whole batch failed with it.
func TestWriteBatchIsolatesAFailingKey(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	hit := func(key string, n int64) commit.Op {
		return commit.Op{Hit: &commit.Hit{Key: key, Rule: fixed(math.MaxInt64, time.Hour), N: n}}
	}
	if err := p.writeBatch([]commit.Op{hit("rate:big", 1)}); err != nil {
		t.Fatalf("first batch: %v", err)
	}
	ops := []commit.Op{hit("rate:a", 1), hit("rate:big", math.MaxInt64), hit("rate:b", 2), hit("rate:c", 3),
		{Peek: &commit.Hit{Key: "rate:a", Rule: fixed(math.MaxInt64, time.Hour)}}, {Probe: true}}
	if err := p.writeBatch(ops); err != nil {
		t.Fatalf("writeBatch: %v, want the batch to commit without the failing key", err)
	}
	if ops[1].Failed == nil || !ops[1].Settled {
		t.Errorf("the overflowing hit: Failed %v, Settled %v; want its own error", ops[1].Failed, ops[1].Settled)
	}
	for i, o := range ops {
		if i != 1 && o.Failed != nil {
			t.Errorf("op %d: Failed %v, want nil", i, o.Failed)
		}
	}
	if got := ops[4].Peek.Result.State.Count; got != 1 {
		t.Errorf("peek of rate:a = %d, want 1", got)
	}
	for key, want := range map[string]int64{"rate:a": 1, "rate:big": 1, "rate:b": 2, "rate:c": 3} {
		if got := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = $1`, []byte(key)); got != want {
			t.Errorf("stored count of %s = %d, want %d", key, got, want)
		}
	}
}
