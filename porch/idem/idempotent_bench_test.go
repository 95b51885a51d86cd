package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// benchCallers is how many callers per GOMAXPROCS the benchmarks run: with
// 2 cores, 64, the connection count of the load harness.
const benchCallers = 32

// benchReplayKeys is the size of the fixed key set replays cycle through.
const benchReplayKeys = 16

// benchChain is the middleware through porch.Chain in front of a handler
// answering 200 "ok", on a SQLite file in b's temporary directory. The pool
// closes before the store, as App does it.
func benchChain(b *testing.B) (http.Handler, *sqlite.Store) {
	b.Helper()
	return benchChainWith(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	})
}

// benchOrders is the application table the exec case writes to, as the
// storefront's checkout writes its orders.
const benchOrders = `CREATE TABLE orders (order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL, created_at INTEGER NOT NULL)`

// benchChainWith is benchChain with handler in front of the middleware.
func benchChainWith(b *testing.B, handler http.HandlerFunc) (http.Handler, *sqlite.Store) {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{})
	b.Cleanup(func() { pool.Close(context.Background()) })
	if _, err := st.DB().Exec(benchOrders); err != nil {
		b.Fatalf("create orders: %v", err)
	}
	m := idem.New(pool, st, idem.Options{})
	return porch.Chain(m)(handler), st
}

// benchPost runs one POST through h, with key unless it is empty, and
// returns the recorder.
func benchPost(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", nil)
	if key != "" {
		r.Header.Set(idem.Header, key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// BenchmarkIdempotent measures a POST through the middleware, with
// httptest recorders, in three cases:
//
//   - unkeyed: no Idempotency-Key, so the middleware lets the request
//     through (the baseline replays are compared with);
//   - replay: one of a small fixed set of keys whose responses are already
//     stored, answered from the store without running the handler;
//   - fresh: a new key per request, so the handler runs and its response is
//     made durable (group commit) before it is answered;
//   - fresh-exec: the same with a handler that writes one row through
//     idem.Exec, as the storefront's checkout does, so that the owner's
//     statement commits with its response.
func BenchmarkIdempotent(b *testing.B) {
	b.Run("unkeyed", func(b *testing.B) {
		h, _ := benchChain(b)
		benchParallel(b, h, func(int64) string { return "" }, false)
	})
	b.Run("replay", func(b *testing.B) {
		h, _ := benchChain(b)
		keys := make([]string, benchReplayKeys)
		for i := range keys {
			keys[i] = "replay-" + strconv.Itoa(i)
			if w := benchPost(h, keys[i]); w.Code != http.StatusOK {
				b.Fatalf("store %q: got status %d, want 200", keys[i], w.Code)
			}
		}
		benchParallel(b, h, func(n int64) string { return keys[n%int64(len(keys))] }, true)
	})
	b.Run("fresh", func(b *testing.B) {
		h, st := benchChain(b)
		before := st.Stats()
		benchParallel(b, h, func(n int64) string { return "fresh-" + strconv.FormatInt(n, 10) }, false)
		after := st.Stats()
		d := store.Stats{Commits: after.Commits - before.Commits, Writes: after.Writes - before.Writes}
		if d.Commits > 0 {
			b.ReportMetric(float64(d.Writes)/float64(d.Commits), "writes/commit")
		}
	})
	b.Run("fresh-exec", func(b *testing.B) {
		h, st := benchChainWith(b, func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get(idem.Header)
			if err := idem.Exec(r.Context(), `INSERT INTO orders (order_id, sku, qty, created_at) VALUES (?, ?, ?, ?)`,
				key, "sku-1", 2, int64(1700000000000)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte("ok"))
		})
		before := st.Stats()
		benchParallel(b, h, func(n int64) string { return "fresh-exec-" + strconv.FormatInt(n, 10) }, false)
		after := st.Stats()
		d := store.Stats{Commits: after.Commits - before.Commits, Writes: after.Writes - before.Writes}
		if d.Commits > 0 {
			b.ReportMetric(float64(d.Writes)/float64(d.Commits), "writes/commit")
		}
		var rows int64
		if err := st.DB().QueryRow(`SELECT count(*) FROM orders`).Scan(&rows); err != nil {
			b.Fatalf("count orders: %v", err)
		}
		if rows != int64(b.N) {
			b.Fatalf("%d orders committed, want one per request (%d)", rows, b.N)
		}
	})
}

// benchParallel drives h from benchCallers callers per GOMAXPROCS, the n-th
// request carrying key(n), and checks that each answer is a 200 (a replay
// when replayed).
func benchParallel(b *testing.B, h http.Handler, key func(n int64) string, replayed bool) {
	b.Helper()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchCallers)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := benchPost(h, key(next.Add(1)))
			if w.Code != http.StatusOK || (w.Header().Get(idem.ReplayedHeader) == "true") != replayed {
				b.Errorf("got status %d, %s %q; want 200, replayed %v",
					w.Code, idem.ReplayedHeader, w.Header().Get(idem.ReplayedHeader), replayed)
				return
			}
		}
	})
}
