// POST /checkout with an Idempotency-Key: a retry gets the first answer
// again, and the order is written once, in the transaction that stores
// that answer. Limited to 100 requests a minute per client address; stops
// cleanly on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	st, err := sqlite.Open("shop.db", sqlite.Options{})
	k := kit.Must(kit.Open(st, err)) // k closes st
	// The application's own table, in the store's database: idem.Exec writes it.
	if _, err := st.DB().Exec(`CREATE TABLE IF NOT EXISTS orders (
		order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL, operation_id TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	app := porch.New()      // a chi router that drains, then runs its closers
	app.OnShutdown(k.Close) // limiters (exact counts), pool, store
	app.Use(k.Limit(100, time.Minute))
	app.With(k.Idempotency(idem.Options{RequireKey: true}).Handler).Post("/checkout", checkout)

	// Ctrl-C or SIGTERM drains the requests in flight; a second one stops
	// at once (app.StopNow), and the closers still flush.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, drain := context.WithCancel(context.Background())
	go func() {
		<-sigs
		drain()
		<-sigs
		app.StopNow()
	}()
	if err := app.Serve(ctx, l); err != nil {
		log.Fatal(err)
	}
}

func checkout(w http.ResponseWriter, r *http.Request) {
	var o struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	if json.NewDecoder(r.Body).Decode(&o) != nil || o.SKU == "" || o.Qty < 1 {
		http.Error(w, `want {"sku":"mug","qty":1}`, http.StatusBadRequest) // stored and replayed, as a 201 is
		return
	}
	id := uuid.NewString()
	opID, _ := idem.OperationID(r.Context()) // the same for every retry: a payment provider's idempotency key
	if err := idem.Exec(r.Context(), `INSERT INTO orders (order_id, sku, qty, operation_id) VALUES ($1, $2, $3, $4)`,
		id, o.SKU, o.Qty, opID); err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable) // a 5xx is not stored, and rolls the write back
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]string{"order_id": id, "operation_id": opID})
}
