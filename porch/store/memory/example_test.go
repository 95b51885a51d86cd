package memory_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// A chi app limited to 2 requests a minute per client, on a store that
// needs no database and no C compiler, and forgets its counts on restart.
func Example() {
	k := kit.Must(kit.Open(memory.Open()))
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
