package shed_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/writeonce/porch-go/porch/shed"
)

// criticalHeader marks a request critical for the Options.Critical of
// the tests' shedders.
const criticalHeader = "X-Critical"

// byHeader is an Options.Critical that reads criticalHeader.
func byHeader(r *http.Request) bool { return r.Header.Get(criticalHeader) != "" }

// request returns a GET /, critical or not by criticalHeader.
func request(critical bool) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if critical {
		r.Header.Set(criticalHeader, "1")
	}
	return r
}

// holder is a handler that holds every request it serves until release
// is closed, telling entered of each when it starts: a test learns which
// requests were admitted from what reached it, never from a sleep.
type holder struct {
	entered chan bool // the class of each request that reached the handler
	release chan struct{}
}

func newHolder(buf int) *holder {
	return &holder{entered: make(chan bool, buf), release: make(chan struct{})}
}

func (h *holder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.entered <- byHeader(r)
	<-h.release
	w.WriteHeader(http.StatusNoContent)
}

// flight is requests sent through one Shedder to a holder, each on its
// own goroutine; the test's cleanup releases the holder and waits for
// every one.
type flight struct {
	h       http.Handler
	held    *holder
	refused chan *httptest.ResponseRecorder
	wg      sync.WaitGroup
	once    sync.Once
}

func newFlight(t *testing.T, s *shed.Shedder, mount func(http.Handler) http.Handler, buf int) *flight {
	t.Helper()
	held := newHolder(buf)
	f := &flight{h: mount(held), held: held, refused: make(chan *httptest.ResponseRecorder, buf)}
	t.Cleanup(f.land)
	return f
}

// land releases every held request and waits until each has returned.
func (f *flight) land() {
	f.once.Do(func() { close(f.held.release) })
	f.wg.Wait()
}

// start sends one request on a goroutine of its own. A refused request
// returns without reaching the holder, and is sent on refused.
func (f *flight) start(r *http.Request) {
	f.wg.Go(func() {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNoContent {
			f.refused <- rec
		}
	})
}

// send starts one request and reports whether it was admitted: it reached
// the holder (and is held there), or was refused with 503.
func (f *flight) send(t *testing.T, critical bool) bool {
	t.Helper()
	f.start(request(critical))
	select {
	case <-f.held.entered:
		return true
	case rec := <-f.refused:
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("refusal: got %d, want 503", rec.Code)
		}
		return false
	}
}
