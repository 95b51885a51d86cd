package store_test

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// benchWriters is how many writers per GOMAXPROCS the committer benchmarks
// run: with 2 cores, 64, the connection count of the load harness.
const benchWriters = 32

// benchSQLite opens a SQLite store in b's temporary directory, closed when b
// ends.
func benchSQLite(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// benchCounterKeys returns n distinct counter keys shaped like the limiter's.
func benchCounterKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "rate:default:ip:198.18." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
	}
	return keys
}

// reportBatch reports the mean number of writes each commit carried while
// the benchmark ran.
func reportBatch(b *testing.B, before, after store.Stats) {
	b.Helper()
	d := store.Stats{Commits: after.Commits - before.Commits, Writes: after.Writes - before.Writes}
	if d.Commits > 0 {
		b.ReportMetric(float64(d.Writes)/float64(d.Commits), "writes/commit")
	}
	if d.Commits > 0 {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(d.Commits), "µs/commit")
	}
	if f := after.Failed - before.Failed; f > 0 {
		b.Errorf("%d commits failed", f)
	}
}

// BenchmarkSaveCounter measures the group-commit writer: many concurrent
// writers each queue a counter and wait until it is durable
// (synchronous=FULL), as a limiter's verdicts do. ns/op is the cost per
// durable write; writes/commit shows how many writes one fsync served.
func BenchmarkSaveCounter(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys []string
	}{
		{"one-key", benchCounterKeys(1)},
		{"many-keys", benchCounterKeys(65536)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := benchSQLite(b)
			start := s.Now()
			var next atomic.Int64
			before := s.Stats()
			b.ReportAllocs()
			b.SetParallelism(benchWriters)
			b.RunParallel(func(pb *testing.PB) {
				done := make(chan error, 1)
				answer := func(err error) { done <- err }
				for pb.Next() {
					n := next.Add(1)
					c := driver.Counter{Key: bc.keys[int(n)%len(bc.keys)], State: driver.State{Start: start, Count: n}, Window: time.Hour}
					if err := s.SaveCounter(c, answer); err != nil {
						b.Error(err)
						return
					}
					if err := <-done; err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportBatch(b, before, s.Stats())
		})
	}
}

// BenchmarkAddHit is BenchmarkSaveCounter for the shared PostgreSQL store:
// each hit is counted by the database in the batch's one statement. It needs
// a server (PORCH_TEST_POSTGRES) and is skipped without one.
func BenchmarkAddHit(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys []string
	}{
		{"one-key", benchCounterKeys(1)},
		{"many-keys", benchCounterKeys(65536)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			p, err := postgres.Open(ctx, pgtest.DSN(b), postgres.Options{})
			if err != nil {
				b.Fatalf("open postgres: %v", err)
			}
			b.Cleanup(func() { p.Close(context.Background()) })
			var next atomic.Int64
			before := p.Stats()
			b.ReportAllocs()
			b.SetParallelism(benchWriters)
			b.RunParallel(func(pb *testing.PB) {
				done := make(chan error, 1)
				answer := func(_ driver.Hit, err error) { done <- err }
				rule := algorithm.MustRule(algorithm.Fixed, 1<<40, time.Hour, 0)
				for pb.Next() {
					key := bc.keys[int(next.Add(1))%len(bc.keys)]
					if err := p.AddHit(key, rule, 1, driver.Lease{}, answer); err != nil {
						b.Error(err)
						return
					}
					if err := <-done; err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportBatch(b, before, p.Stats())
		})
	}
}
