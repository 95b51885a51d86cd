package sqlite

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// benchBatchSize is the batch BenchmarkWriteBatch writes: about what the
// load harness's fresh-key row commits at once (19–34 writes a commit).
const benchBatchSize = 32

// BenchmarkWriteBatch measures the committer's transaction alone, one
// batch of benchBatchSize idempotency responses per op, with no goroutine
// in the way, so that its instruction count (callgrind) does not depend on
// how requests happened to batch:
//
//   - plain: responses of handlers that wrote nothing else;
//   - owner: each with one INSERT its handler queued through idem.Exec, as
//     the storefront's checkout does.
func BenchmarkWriteBatch(b *testing.B) {
	for _, owner := range []bool{false, true} {
		name := "plain"
		if owner {
			name = "owner"
		}
		b.Run(name, func(b *testing.B) {
			// No ExecBudget: under callgrind a batch runs 50 times slower,
			// and owners past the budget would be deferred, unwritten.
			s, err := Open(filepath.Join(b.TempDir(), "porch.db"), Options{ExecBudget: -1})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(context.Background()) })
			if _, err := s.db.Exec(`CREATE TABLE orders (order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL, created_at INTEGER NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			batch := make([]commit.Op, benchBatchSize)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				now := s.Now()
				for i := range batch {
					key := "idem:ip:9:127.0.0.1:k-" + strconv.Itoa(n)
					n++
					batch[i] = commit.Op{Response: &driver.Response{Key: key, Digest: make([]byte, 32), Status: 200,
						ContentType: "text/plain; charset=utf-8", Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}}
					if owner {
						batch[i].Owner = []commit.Statement{{Query: `INSERT INTO orders (order_id, sku, qty, created_at) VALUES (?, ?, ?, ?)`,
							Args: []any{key, "sku-1", 2, int64(1700000000000)}}}
					}
				}
				if err := s.writeBatch(batch); err != nil {
					b.Fatal(err)
				}
				for i := range batch {
					if batch[i].Failed != nil || batch[i].Deferred {
						b.Fatalf("write %d: failed %v, deferred %v; want it written", i, batch[i].Failed, batch[i].Deferred)
					}
				}
			}
		})
	}
}

// BenchmarkWriteCounters measures the committer's transaction alone for a
// batch of first hits: benchBatchSize counters of keys never written
// before, as the many-keys rows commit them (every request a key's first
// hit, which must be durable before it is answered). Under callgrind its
// instructions per op are a batch's per-commit and per-row work together.
func BenchmarkWriteCounters(b *testing.B) {
	for _, size := range []int{8, benchBatchSize} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "porch.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(context.Background()) })
			batch := make([]commit.Op, size)
			counters := make([]driver.Counter, size)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				start := s.Now()
				for i := range batch {
					counters[i] = driver.Counter{Key: "rate:default:ip:198.18." + strconv.Itoa(n/256%256) + "." + strconv.Itoa(n%256),
						State: driver.State{Start: start, Count: 1}, Window: time.Hour}
					n++
					batch[i] = commit.Op{Counter: &counters[i]}
				}
				if err := s.writeBatch(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
