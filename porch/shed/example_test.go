package shed_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/shed"
)

// Critical routes marked per chi group: the catalogue is shed once half
// the capacity is in flight, the checkout only at capacity, and the
// health probe never. A request that never returns stands in for a slow
// checkout.
func Example() {
	sh := shed.New(2, shed.Options{Reserve: 0.5})
	slow, release := make(chan struct{}), make(chan struct{})
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {}) // never counted
	r.Group(func(r chi.Router) {
		r.Use(sh.Handler)
		r.Get("/products", func(w http.ResponseWriter, r *http.Request) {})
	})
	r.Group(func(r chi.Router) {
		r.Use(sh.Critical)
		r.Post("/checkout", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("slow") {
				slow <- struct{}{}
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		})
	})
	get := func(method, path string) int {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code
	}

	fmt.Println("idle:", get(http.MethodGet, "/products"))
	done := make(chan int)
	go func() { done <- get(http.MethodPost, "/checkout?slow") }()
	<-slow
	fmt.Println("one checkout in flight:", get(http.MethodGet, "/products"), get(http.MethodPost, "/checkout"), get(http.MethodGet, "/healthz"))
	close(release)
	fmt.Println("the slow checkout:", <-done)
	fmt.Println("in flight:", sh.InFlight())
	// Output:
	// idle: 200
	// one checkout in flight: 503 201 200
	// the slow checkout: 201
	// in flight: 0
}
