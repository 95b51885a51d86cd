package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/sqlite"

	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
)

// Concurrent retries of many keys through two
// middlewares on one SQLite store, batched together (CommitDelay), where a
// third of the owners' handlers make a second write that fails (a
// constraint) and another third a refused statement. The good keys' side
// effect runs once and every answer of a key is the same bytes; no bad key
// leaves a row; bad owners never fail a good neighbour in their batch.
func TestRetriesAmongFailingNeighbours(t *testing.T) {
	// The statements' time budget is not what this test checks, and on a
	// loaded machine a good owner's insert can outlast the default one
	// (50 ms) and fail on its own: give it room.
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{
		Options:    store.Options{CommitDelay: 2 * time.Millisecond},
		ExecBudget: time.Minute,
	})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(context.Background()); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	if _, err := st.DB().Exec(`CREATE TABLE ledger (id TEXT NOT NULL PRIMARY KEY, note TEXT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`INSERT INTO ledger (id) VALUES ('taken')`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idem.Header)
		mu.Lock()
		runs[key]++
		n := runs[key]
		mu.Unlock()
		if err := idem.Exec(r.Context(), `INSERT INTO ledger (id, note) VALUES ($1, $2)`, key, fmt.Sprint(n)); err != nil {
			t.Errorf("Exec: %v", err)
		}
		switch {
		case strings.HasPrefix(key, "dup-"):
			idem.Exec(r.Context(), `INSERT INTO ledger (id) VALUES ('taken')`) //nolint:errcheck
		case strings.HasPrefix(key, "ref-"):
			idem.Exec(r.Context(), `COMMIT`) //nolint:errcheck
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s run %d", key, n)
	})
	mws := []http.Handler{
		idem.New(newPool(t, porchOptions()), st, idem.Options{}).Handler(h),
		idem.New(newPool(t, porchOptions()), st, idem.Options{}).Handler(h),
	}
	type answer struct {
		code int
		body string
	}
	var amu sync.Mutex
	answers := map[string][]answer{}
	var wg sync.WaitGroup
	for i := range 60 {
		key := []string{"ok-", "dup-", "ref-"}[i%3] + fmt.Sprint(i)
		for j := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x"))
				req.Header.Set(idem.Header, key)
				rec := httptest.NewRecorder()
				mws[j%2].ServeHTTP(rec, req)
				b, _ := io.ReadAll(rec.Body)
				amu.Lock()
				answers[key] = append(answers[key], answer{rec.Code, string(b)})
				amu.Unlock()
			}()
		}
	}
	wg.Wait()
	rows := map[string]int{}
	rs, err := st.DB().Query(`SELECT id FROM ledger`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id string
		rs.Scan(&id)
		rows[id]++
	}
	rs.Close()
	for key, as := range answers {
		good := strings.HasPrefix(key, "ok-")
		if good {
			if runs[key] != 1 || rows[key] != 1 {
				t.Errorf("%s: %d runs, %d rows, want 1 and 1", key, runs[key], rows[key])
			}
			for _, a := range as {
				if a != as[0] || a.code != http.StatusCreated {
					t.Errorf("%s: answers %v, want one 201 replayed byte for byte", key, as)
					break
				}
			}
			continue
		}
		if rows[key] != 0 {
			t.Errorf("%s: a failing owner left %d rows", key, rows[key])
		}
		for _, a := range as {
			if a.code < 500 {
				t.Errorf("%s: answered %d %q, want a failure", key, a.code, a.body)
			}
		}
	}
}
