package shed_test

import (
	"net/http"
	"testing"

	"github.com/writeonce/porch-go/porch/shed"
)

// discard is a ResponseWriter that keeps nothing, so that the benchmarks
// measure the middleware, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkServe is one request through a bare handler, and through a
// Shedder that admits it (with Options.Critical asked, as the storefront
// asks it) or, at capacity, refuses it with 503, from every core at once,
// as a server runs them.
// Compare with benchstat -col /handler.
func BenchmarkServe(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	admit := shed.New(1<<30, shed.Options{Reserve: 0.25, Critical: byHeader})
	full := shed.New(1, shed.Options{Critical: byHeader})
	held := newHolder(1)
	go full.Handler(held).ServeHTTP(&discard{h: http.Header{}}, request(false)) // joined below
	<-held.entered
	defer func() {
		close(held.release)
		for full.InFlight() != 0 { // the held request's return
		}
	}()
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"handler=bare", ok},
		{"handler=shed", admit.Handler(ok)},
		{"handler=shed-refused", full.Handler(ok)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := request(false)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					bc.h.ServeHTTP(w, r)
				}
			})
		})
	}
}
