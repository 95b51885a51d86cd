package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// benchCallers is how many callers per GOMAXPROCS the limiter benchmarks
// run: with 2 cores, 64, the connection count of the load harness.
const benchCallers = 32

// benchLimit is high enough that every request is allowed: the benchmarks
// measure the counting path, not refusals.
const benchLimit = 1_000_000_000

// benchLimiter is a durable limiter on a SQLite file in b's temporary
// directory and the real clock. The pool closes before the store, as App
// does it.
func benchLimiter(b *testing.B) (*rate.Limiter, *sqlite.Store) {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{})
	b.Cleanup(func() { pool.Close(context.Background()) })
	lim, err := rate.New(pool, st, benchLimit, time.Hour, rate.Options{})
	if err != nil {
		b.Fatalf("new limiter: %v", err)
	}
	return lim, st
}

// benchClients returns n distinct client addresses, in 198.18.0.0/15 (the
// benchmarking range), as RemoteAddr values.
func benchClients(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "198." + strconv.Itoa(18+i/65536%2) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256) + ":40000"
	}
	return addrs
}

var benchKeyModes = []struct {
	name    string
	clients int
}{
	{"one-key", 1},
	{"many-keys", 65536},
}

// reportBatch reports the mean number of counter writes per commit while
// the benchmark ran.
func reportBatch(b *testing.B, st *sqlite.Store, before store.Stats) {
	b.Helper()
	after := st.Stats()
	d := store.Stats{Commits: after.Commits - before.Commits, Writes: after.Writes - before.Writes}
	if d.Commits > 0 {
		b.ReportMetric(float64(d.Writes)/float64(d.Commits), "writes/commit")
	}
}

// BenchmarkAllow measures a verdict: the hop to the key's actor, the
// in-memory count, and the wait until the new count is durable. Every
// caller waits for its own commit, so ns/op falls as more callers share
// each fsync (writes/commit).
func BenchmarkAllow(b *testing.B) {
	for _, km := range benchKeyModes {
		keys := make([]string, km.clients)
		for i, a := range benchClients(km.clients) {
			keys[i] = a
		}
		b.Run(km.name, func(b *testing.B) {
			lim, st := benchLimiter(b)
			ctx := context.Background()
			var next atomic.Int64
			before := st.Stats()
			b.ReportAllocs()
			b.SetParallelism(benchCallers)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := keys[int(next.Add(1))%len(keys)]
					v, err := lim.Allow(ctx, key)
					if err != nil || !v.Allowed {
						b.Errorf("allow %q: %+v, %v", key, v, err)
						return
					}
				}
			})
			reportBatch(b, st, before)
		})
	}
}

// BenchmarkLimiterHTTP is BenchmarkAllow through the two ways a limiter
// sits in front of a handler, with httptest recorders: what a request pays
// on top of the verdict (key, headers, buffering under a chain).
func BenchmarkLimiterHTTP(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	for _, wiring := range []struct {
		name string
		wrap func(l *rate.Limiter, h http.Handler) http.Handler
	}{
		{"Chain", func(l *rate.Limiter, h http.Handler) http.Handler { return porch.Chain(l)(h) }},
		{"Handler", func(l *rate.Limiter, h http.Handler) http.Handler { return l.Handler(h) }},
	} {
		for _, km := range benchKeyModes {
			clients := benchClients(km.clients)
			b.Run(wiring.name+"/"+km.name, func(b *testing.B) {
				lim, st := benchLimiter(b)
				h := wiring.wrap(lim, ok)
				var next atomic.Int64
				before := st.Stats()
				b.ReportAllocs()
				b.SetParallelism(benchCallers)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r := httptest.NewRequest(http.MethodGet, "/", nil)
						r.RemoteAddr = clients[int(next.Add(1))%len(clients)]
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						if w.Code != http.StatusOK {
							b.Errorf("got status %d, want 200 (body %s)", w.Code, w.Body)
							return
						}
					}
				})
				reportBatch(b, st, before)
			})
		}
	}
}
