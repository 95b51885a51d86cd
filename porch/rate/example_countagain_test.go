package rate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A batch endpoint replays each of its operations through the API it
// belongs to, under the same limiter, for the caller. The limiter counts
// the batch once, and each operation as a request of its own: one built
// with http.NewRequestWithContext has no RequestURI, so it is never taken
// for the batch. CountAgain says so on purpose, and keeps it so for an
// operation built as a copy of the batch (r.Clone, r.WithContext), which
// has the batch's key and RequestURI and would otherwise be the batch
// again, and pass uncounted. An operation for another user is counted as
// that user's either way.
func ExampleCountAgain() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order

	lim, err := k.Limiter(3, time.Minute, rate.Options{KeyFunc: porch.KeyByHeader("X-User")})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	api := lim.Handler(mux)
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /batch", func(w http.ResponseWriter, r *http.Request) {
		ctx := rate.CountAgain(r.Context())
		for _, id := range []string{"1", "2", "3"} {
			op, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/orders/"+id, nil)
			op.Header.Set("X-User", r.Header.Get("X-User"))
			// A new request has no RemoteAddr. Keyed by address (no
			// X-User), one without would be a 500: it names no client,
			// and counting it would put every caller's operations on
			// one shared count.
			op.RemoteAddr = r.RemoteAddr
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, op)
			fmt.Fprintln(w, "order", id, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
		}
	})

	req := httptest.NewRequest(http.MethodPost, "/batch", nil)
	req.Header.Set("X-User", "ann")
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	fmt.Println("batch", rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	fmt.Print(rec.Body)
	// Output:
	// batch 200 2
	// order 1 200 1
	// order 2 200 0
	// order 3 429 0
}
