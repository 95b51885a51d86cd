// The checkout of examples/checkout on the memory store: no database file
// and no C compiler. The counts, the stored answers and the orders live in
// the process and are forgotten together when it stops. The memory store
// runs no SQL, so the order is kept in a map rather than written with
// idem.Exec, which fails there.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/memory"
)

var (
	mu     sync.Mutex
	orders = map[string]string{} // order ID: SKU
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	k := kit.Must(kit.Open(memory.Open()))
	app := porch.New()      // a chi router that drains, then runs its closers
	app.OnShutdown(k.Close) // limiters, pool, store
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
	mu.Lock()
	orders[id] = o.SKU // runs once per key: a retry gets the stored answer instead
	mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}
