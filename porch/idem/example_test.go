package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A checkout that requires an Idempotency-Key: a retry replays the first
// response without running the handler again, and a key reused for another
// request is refused.
//
// Each part by hand: idem.New on a store and a pool of your own, closed
// pool first (its last jobs write to the store). The other examples get
// the same from kit.Open and Kit.Idempotency.
func Example() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close(context.Background())
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(context.Background()) // before the store: its last jobs may write

	keys := idem.New(pool, st, idem.Options{RequireKey: true})
	orders := 0
	r := chi.NewRouter()
	r.With(keys.Handler).Post("/checkout", func(w http.ResponseWriter, r *http.Request) {
		orders++ // the side effect that must happen once per key
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	checkout := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/checkout", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.Header.Get("Content-Type") == porch.ProblemContentType {
			var p porch.Problem
			json.Unmarshal(b, &p)
			b = []byte(p.Type)
		}
		fmt.Printf("%d %s replayed=%t\n", res.StatusCode, b, res.Header.Get("Idempotency-Replayed") == "true")
	}
	checkout("order-1", `{"sku":"tea"}`)
	checkout(`"order-1"`, `{"sku":"tea"}`) // the same key as a structured-field string
	checkout("order-1", `{"sku":"coffee"}`)
	checkout("", `{"sku":"tea"}`)
	fmt.Println("orders:", orders)
	// Output:
	// 201 {"order":1} replayed=false
	// 201 {"order":1} replayed=true
	// 422 https://porch.dev/problems/idempotency-key-reused replayed=false
	// 400 https://porch.dev/problems/idempotency-key-required replayed=false
	// orders: 1
}
