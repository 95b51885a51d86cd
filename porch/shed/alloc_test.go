package shed_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/writeonce/porch-go/porch/shed"
)

// An admitted request costs one allocation: the copy of the request that
// carries the shedder's mark. The mark itself rides in that allocation.
func TestAdmissionAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count: skipped with -short")
	}
	s := shed.New(1<<20, shed.Options{Reserve: 0.25, Critical: byHeader})
	h := s.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := request(false)
	w := &discard{h: http.Header{}}
	if got := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) }); got > 1 {
		t.Errorf("allocations per admitted request: got %v, want at most 1", got)
	}
	// The mark still works: a second mount passes the request on.
	inner := 0
	h = s.Handler(s.Critical(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { inner = s.InFlight() })))
	h.ServeHTTP(httptest.NewRecorder(), r)
	if inner != 1 {
		t.Errorf("InFlight inside two mounts: got %d, want 1", inner)
	}
}
