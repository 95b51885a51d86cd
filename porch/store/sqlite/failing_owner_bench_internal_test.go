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

// What one failing owner costs its batch since the
// bare first pass (cb00be8): the batch is written twice. "last-fails" is a
// client who sends one order whose INSERT violates the key at the end of
// each batch (a duplicate order id is enough): every batch pays its owners
// twice, where a savepoint each cost 16% more.
func BenchmarkOneFailingOwner(b *testing.B) {
	for _, fail := range []string{"none", "first-fails", "last-fails"} {
		b.Run(fail, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "porch.db"), Options{ExecBudget: -1})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(context.Background()) })
			if _, err := s.db.Exec(`CREATE TABLE orders (order_id TEXT PRIMARY KEY, sku TEXT NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			s.db.Exec(`INSERT INTO orders VALUES ('dup', 'x')`)
			batch := make([]commit.Op, benchBatchSize)
			n := 0
			for b.Loop() {
				now := s.Now()
				for i := range batch {
					key := "k-" + strconv.Itoa(n)
					n++
					id := key
					if (fail == "last-fails" && i == len(batch)-1) || (fail == "first-fails" && i == 0) {
						id = "dup"
					}
					batch[i] = commit.Op{Response: &driver.Response{Key: key, Digest: make([]byte, 32), Status: 200,
						Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)},
						Owner: []commit.Statement{{Query: `INSERT INTO orders (order_id, sku) VALUES (?, ?)`, Args: []any{id, "sku-1"}}}}
				}
				if err := s.writeBatch(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
