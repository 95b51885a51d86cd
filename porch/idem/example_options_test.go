package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A JSON API that replays Location with its 201, takes a retry its client
// re-encoded as the same request, and names its problems under its own URI.
func ExampleOptions() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the pool, then the store

	keys := k.Idempotency(idem.Options{
		KeepHeaders: []string{"Location"},
		Fingerprint: idem.FingerprintJSON,
		ProblemBase: "https://api.example.com/problems/",
	})
	orders := 0
	h := keys.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.Header().Set("Set-Cookie", "cart=empty") // never replayed
		w.WriteHeader(http.StatusCreated)
	}))

	for _, body := range []string{
		`{"sku":"tea","qty":2}`,
		`{ "qty": 2.0, "sku": "tea" }`, // the client's retry, re-encoded
		`{"sku":"tea","qty":3}`,        // another request under the same key
	} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "order-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d Location=%q Set-Cookie=%q\n", rec.Code, rec.Header().Get("Location"),
			rec.Header().Get("Set-Cookie"))
		if rec.Header().Get("Content-Type") == porch.ProblemContentType {
			var p porch.Problem
			json.Unmarshal(rec.Body.Bytes(), &p)
			fmt.Println("  type:", p.Type)
		}
	}
	fmt.Println("orders:", orders)
	// Output:
	// 201 Location="/orders/1" Set-Cookie="cart=empty"
	// 201 Location="/orders/1" Set-Cookie=""
	// 422 Location="" Set-Cookie=""
	//   type: https://api.example.com/problems/idempotency-key-reused
	// orders: 1
}

func ExampleFingerprintJSON() {
	for _, body := range []string{
		`{"qty": 2, "sku": "tea", "tags": ["a", "b"]}`,
		`{"tags":["a","b"],"sku":"t\u0065a","qty":2.0}`,
		`{"sku":"tea","qty":2,"tags":["b","a"]}`,
		`{"price": 1.50, "big": 1e3}`,
		`{"sku":"tea","sku":"coffee"}`, // no canonical form: its bytes
	} {
		fp, _ := idem.FingerprintJSON([]byte(body))
		fmt.Printf("%s\n", fp)
	}
	// Output:
	// {"qty":2,"sku":"tea","tags":["a","b"]}
	// {"qty":2,"sku":"tea","tags":["a","b"]}
	// {"qty":2,"sku":"tea","tags":["b","a"]}
	// {"big":1e3,"price":15e-1}
	// {"sku":"tea","sku":"coffee"}
}
