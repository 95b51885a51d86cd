package idem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// slowExec is one INSERT that counts to fifty million in a recursive
// CTE before it writes its row: tens of seconds of CPU inside a write
// statement on any machine, so that a limiter hit held behind all of it
// is told, by a bound a loaded machine cannot reach, from one held for a
// budget. Interrupted at the budget, it costs the budget.
const slowExec = `INSERT INTO ledger (id) SELECT 'slow-' || count(*) FROM
	(WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT 50000000) SELECT i FROM c)`

// On SQLite every write of the process goes through one committer, so an
// owner's slow statement held up every limiter hit behind it: one that ran
// 6.4 s made every unrelated request wait 6.4 s. With the exec budget the
// statement is interrupted after the default sqlite.Options.ExecBudget
// (50 ms), its request is 500 …/idempotency-write-failed with nothing
// stored, and limiter hits on other keys, started while it runs, wait at
// most about one budget.
//
// The latencies it logs are the figures in docs/design.md ("Exec budget"):
// go test -run TestSlowExecDoesNotStallLimiter -v ./porch/idem/
func TestSlowExecDoesNotStallLimiter(t *testing.T) {
	st := openStore(t, store.Options{})
	if _, err := st.DB().Exec(`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, porchOptions())
	lim, err := rate.New(pool, st, 1000, time.Hour, rate.Options{Name: "stall"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close(context.Background()) })
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := idem.Exec(r.Context(), slowExec); err != nil {
			t.Errorf("queue the slow statement: %v", err)
		}
		w.WriteHeader(http.StatusCreated)
	})
	owner := make(chan *httptest.ResponseRecorder, 1)
	go func() { owner <- send(idem.New(pool, st, idem.Options{}).Handler(slow), "slow", "a") }()
	// Start the hits once the committer runs the statement. Within a budget
	// of 50 ms a poll of the goroutines can miss it, so the owner's answer
	// (the statement is over) also lets them start.
	var answered *httptest.ResponseRecorder
	for deadline := time.Now().Add(waitLimit); answered == nil && !inStack("porch/store/sqlite.(*Store).execApp("); {
		select {
		case answered = <-owner:
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer never ran the slow statement")
		}
	}

	const hits = 200
	took := make([]time.Duration, hits)
	var wg sync.WaitGroup
	for i := range hits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if _, err := lim.Allow(context.Background(), fmt.Sprint("client-", i)); err != nil {
				t.Errorf("Allow: %v", err)
			}
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	slices.Sort(took)
	p50, maxTook := took[hits/2], took[hits-1]
	t.Logf("%d limiter hits during a slow owner's statement: p50 %s, max %s", hits, p50.Round(time.Millisecond), maxTook.Round(time.Millisecond))

	got := answered
	if got == nil {
		got = <-owner
	}
	if got.Code != http.StatusInternalServerError || !strings.Contains(got.Body.String(), idem.ProblemWriteFailed) {
		t.Errorf("the slow owner: got %d %s, want 500 %s", got.Code, got.Body, idem.ProblemWriteFailed)
	}
	var rows int
	if err := st.DB().QueryRow(`SELECT (SELECT count(*) FROM ledger) + (SELECT count(*) FROM porch_idem_responses)`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the slow owner left %d rows (%v), want none", rows, err)
	}
	// A deadline, not a measurement: the statement alone runs for tens of
	// seconds, the budget is 50 ms, and a loaded machine (-race beside
	// busy loops, where the slowest hit waited 90 to 140 ms) may add
	// seconds more.
	if maxTook > 5*time.Second {
		t.Errorf("the slowest limiter hit waited %s behind one owner's statement; want under 5s", maxTook)
	}
}

// inStack reports whether any goroutine's stack holds frame.
func inStack(frame string) bool { return testkit.CountStacks(frame) > 0 }
