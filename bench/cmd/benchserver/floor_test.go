package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/writeonce/porch-go/porch/store"
)

// TestFloorCountsExactly checks that the durability floor is a limiter
// that counts every request durably before answering, which its rows'
// claim rests on: of parallel requests from one client over a limit of
// 10, exactly 10 are served, whichever batches they land in, and the
// count the database holds is every request's.
func TestFloorCountsExactly(t *testing.T) {
	for _, d := range []store.Durability{store.SurvivesPowerLoss, store.SurvivesProcessCrash} {
		path := t.TempDir() + "/floor.db"
		f, err := openFloor(path, 10, d, 64, floorGather)
		if err != nil {
			t.Fatal(err)
		}
		h := f.Handler(http.HandlerFunc(ok))
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				mu.Lock()
				codes[w.Code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[http.StatusOK] != 10 || codes[http.StatusTooManyRequests] != 30 {
			t.Errorf("durability %d: answers %v, want 10 × 200 and 30 × 429", d, codes)
		}
		var count int64
		if err := f.conn.QueryRowContext(context.Background(), `SELECT count FROM floor_counters`).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count != 40 {
			t.Errorf("durability %d: stored count %d, want 40", d, count)
		}
		if st := f.Stats(); st.Commits == 0 || st.Failed != 0 {
			t.Errorf("durability %d: stats %+v, want commits and no failures", d, st)
		}
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
