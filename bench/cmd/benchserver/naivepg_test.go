package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgschema"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// testPostgres is PORCH_TEST_POSTGRES, else the local server; the test is
// skipped when it does not answer, unless PORCH_REQUIRE_POSTGRES is set.
func testPostgres(t *testing.T) string {
	t.Helper()
	dsn := envOr("PORCH_TEST_POSTGRES", pgschema.LocalDSN)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pgschema.Exec(ctx, dsn, "SELECT 1"); err != nil {
		if os.Getenv("PORCH_REQUIRE_POSTGRES") != "" {
			t.Fatalf("PostgreSQL required but unavailable: %v", err)
		}
		t.Skipf("no PostgreSQL at %s (set PORCH_TEST_POSTGRES): %v", dsn, err)
	}
	return dsn
}

// TestNaivePGCountsExactly checks that the hand-written PostgreSQL
// limiter is what its rows claim: of parallel requests from one client
// over a limit of 10, exactly 10 are served and every request is counted,
// on sessions whose synchronous_commit is the durability's.
func TestNaivePGCountsExactly(t *testing.T) {
	dsn := testPostgres(t)
	for _, tc := range []struct {
		durability store.Durability
		sync       string
	}{{store.SurvivesPowerLoss, "on"}, {store.SurvivesProcessCrash, "off"}} {
		ctx := context.Background()
		app := porch.New()
		n, err := openNaivePG(ctx, dsn, 10, tc.durability, app)
		if err != nil {
			t.Fatal(err)
		}
		h := n.Handler(http.HandlerFunc(ok))
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				mu.Lock()
				codes[w.Code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codes[http.StatusOK] != 10 || codes[http.StatusTooManyRequests] != 30 {
			t.Errorf("synchronous_commit %s: answers %v, want 10 × 200 and 30 × 429", tc.sync, codes)
		}
		var count int64
		if err := n.pool.QueryRow(ctx, `SELECT n FROM c`).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count != 40 {
			t.Errorf("synchronous_commit %s: stored count %d, want 40", tc.sync, count)
		}
		var sync string
		if err := n.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if sync != tc.sync {
			t.Errorf("durability %d: a session's synchronous_commit is %s, want %s", tc.durability, sync, tc.sync)
		}
		if st := n.Stats(); st.Commits != 40 {
			t.Errorf("synchronous_commit %s: stats %+v, want 40 commits", tc.sync, st)
		}
		if err := app.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
