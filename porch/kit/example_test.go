package kit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A chi app limited to 2 requests a minute per client, in three lines: open,
// close in order, use.
func Example() {
	dir, _ := os.MkdirTemp("", "porch-kit")
	defer os.RemoveAll(dir)

	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background())
	r := chi.NewRouter()
	r.Use(k.Limit(2, time.Minute))

	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })
	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 1
	// 200 0
	// 429 0
}
