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

// Only successes are stored: a client that was told 422 corrects its
// request and retries under the same key, and the retry runs.
func ExampleOptions_storeStatus() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the pool, then the store

	keys := k.Idempotency(idem.Options{
		StoreStatus: func(status int) bool { return status < 400 },
	})
	h := keys.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var order struct{ Qty int }
		if json.NewDecoder(r.Body).Decode(&order) != nil || order.Qty < 1 {
			w.WriteHeader(http.StatusUnprocessableEntity) // not stored: its Exec writes are discarded too
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, body := range []string{`{"qty":0}`, `{"qty":2}`, `{"qty":2}`} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "order-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q\n", rec.Code, rec.Header().Get("Idempotency-Replayed"))
	}
	// Output:
	// 422 replayed=""
	// 201 replayed=""
	// 201 replayed="true"
}

// A response larger than MaxStoredBody is withheld: the client is told that
// nothing was done, and the key is free for its retry.
func ExampleOptions_maxStoredBody() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the pool, then the store

	keys := k.Idempotency(idem.Options{MaxStoredBody: 1024})
	h := keys.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 2048)))
	}))
	req := httptest.NewRequest(http.MethodPost, "/export", strings.NewReader(""))
	req.Header.Set("Idempotency-Key", "export-1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var p porch.Problem
	json.Unmarshal(rec.Body.Bytes(), &p)
	fmt.Println(rec.Code, p.Type)
	// Output:
	// 500 https://porch.dev/problems/idempotency-response-too-large
}

// Clients written for Fiber send X-Idempotency-Key; those written for
// Stripe look for Idempotent-Replayed.
func ExampleOptions_keyHeader() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the pool, then the store

	keys := k.Idempotency(idem.Options{
		KeyHeader:      "X-Idempotency-Key",
		ReplayedHeader: "Idempotent-Replayed",
	})
	h := keys.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set("X-Idempotency-Key", "order-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d Idempotent-Replayed=%q\n", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// 201 Idempotent-Replayed=""
	// 201 Idempotent-Replayed="true"
}

// A support tool looks up a customer's key and forgets the 400 stored
// under it, so that the customer's corrected retry runs.
func ExampleKeys_Forget() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "shop.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the pool, then the store

	keys := k.Idempotency(idem.Options{
		// In a real API, the account the auth middleware authenticated.
		Principal: porch.KeyByHeader("X-Account"),
	})
	runs := 0
	h := keys.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set("X-Account", "acct-7")
		req.Header.Set("Idempotency-Key", "order-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	fmt.Println("first:", post(), "retry:", post())

	ctx := context.Background()
	scope := idem.Scope{Principal: "acct-7"}
	state, err := keys.Lookup(ctx, scope, "order-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(state.Phase, state.Status)
	if err := keys.Forget(ctx, scope, "order-1"); err != nil {
		panic(err)
	}
	state, _ = keys.Lookup(ctx, scope, "order-1")
	fmt.Println(state.Phase)
	fmt.Println("retry:", post(), "runs:", runs)
	// Output:
	// first: 400 retry: 400
	// stored 400
	// absent
	// retry: 201 runs: 2
}
