// A chi app whose routes are limited to 100 requests a minute per client
// address, counted in app.db, which stops cleanly on Ctrl-C.
package main

import (
	"context"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	k := kit.Must(kit.Open(sqlite.Open("app.db", sqlite.Options{}))) // or memory.Open()
	r := chi.NewRouter()
	r.Use(k.Limit(100, time.Minute)) // 100 a minute per client address
	r.Get("/products", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[{"sku":"mug"}]` + "\n"))
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served: // the listener failed
		log.Print(err)
	case <-ctx.Done(): // Ctrl-C or SIGTERM
	}
	stop() // from here a second Ctrl-C or SIGTERM ends the process at once, Go's default
	// Drain first, then close the kit: limiters (exact counts), pool, store.
	drain, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		log.Print(err)
	}
	// Bounded too: a store that stopped answering must not hold the exit
	// for ever. Past 10 s the kit returns what it could not flush.
	flush, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelFlush()
	if err := k.Close(flush); err != nil {
		log.Fatal(err)
	}
}
