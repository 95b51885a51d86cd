package shed_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch/shed"
)

// The ways out of a handler a hostile client or a careless handler can
// take, over a real connection: each gives its slot back exactly once.
func TestReleaseOverTheWire(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"http.ErrAbortHandler", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }},
		{"hijacked and closed", func(w http.ResponseWriter, r *http.Request) {
			c, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n") //nolint:errcheck // the client reads it
			buf.Flush()                                                             //nolint:errcheck // as above
			c.Close()
		}},
		{"hijacked, connection kept by a goroutine", func(w http.ResponseWriter, r *http.Request) {
			// A websocket library's shape: the handler returns, the
			// connection lives on. The slot is the handler's, not the
			// connection's.
			c, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			go func() { // ends when the client closes the connection
				defer c.Close()
				buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n") //nolint:errcheck // the client reads it
				buf.Flush()                                                             //nolint:errcheck // as above
				io.Copy(io.Discard, c)                                                  //nolint:errcheck // until the client hangs up
			}()
		}},
		{"streamed with Flush", func(w http.ResponseWriter, r *http.Request) {
			for range 3 {
				w.Write([]byte("chunk\n")) //nolint:errcheck // the client reads it
				if err := http.NewResponseController(w).Flush(); err != nil {
					panic(err) // the shedder must not hide the Flusher
				}
			}
		}},
		{"client hung up mid-body", func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) //nolint:errcheck // fails when the client hangs up
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs := &recorder{}
			s := shed.New(1, shed.Options{Observer: obs})
			srv := httptest.NewServer(s.Handler(tt.handler))
			t.Cleanup(srv.Close)
			for i := range 3 {
				if tt.name == "client hung up mid-body" {
					hangUpMidBody(t, srv.URL, func() bool { return s.InFlight() == 1 })
				} else {
					res, err := srv.Client().Get(srv.URL)
					if err == nil {
						io.Copy(io.Discard, res.Body) //nolint:errcheck // only the slot matters
						res.Body.Close()
					}
				}
				waitFor(t, "the slot to be free", func() bool { return s.InFlight() == 0 })
				if got := obs.count(shed.Released); got != i+1 {
					t.Fatalf("request %d: released %d times, want %d", i, got, i+1)
				}
			}
		})
	}
}

// hangUpMidBody sends a request that promises 1 MiB of body, sends a few
// bytes, and closes the connection once the handler is reading it.
func hangUpMidBody(t *testing.T, url string, reading func() bool) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	req.ContentLength = 1 << 20
	done := make(chan struct{})
	go func() { // joined below
		defer close(done)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
	}()
	pw.Write([]byte("partial")) //nolint:errcheck // read by the transport
	waitFor(t, "the handler to read the body", reading)
	cancel()
	pw.CloseWithError(errors.New("hung up"))
	<-done
}

// The same Shedder mounted by the router, again by a mounted sub-router
// and its own Use, and as Critical on the route, with the request copied
// by r.WithContext and r.Clone between: counted once.
func TestMountedManyTimesCountsOnce(t *testing.T) {
	s := shed.New(4, shed.Options{})
	var inside int
	copyReq := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), struct{}{}, 1)).Clone(r.Context()))
		})
	}
	sub := chi.NewRouter()
	sub.Use(s.Handler, copyReq, s.Handler)
	sub.With(s.Critical).Get("/x", func(w http.ResponseWriter, r *http.Request) { inside = s.InFlight() })
	root := chi.NewRouter()
	root.Use(s.Handler, copyReq)
	root.Mount("/api", sub)
	rec := httptest.NewRecorder()
	root.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/x", nil))
	if rec.Code != http.StatusOK || inside != 1 || s.InFlight() != 0 {
		t.Errorf("got status %d, InFlight %d inside and %d after; want 200, 1 and 0", rec.Code, inside, s.InFlight())
	}
}

// Many goroutines, each request ending one of the ways a handler ends
// (returns, panics, aborts, passes through a second mount), while a
// watcher reads the count: never below 0, never past the capacity, and 0
// once all are done.
func TestStressEveryWayOut(t *testing.T) {
	const capacity, workers, each = 5, 24, 300
	s := shed.New(capacity, shed.Options{Reserve: 0.4, Critical: byHeader})
	h := s.Handler(s.Critical(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runtime.Gosched()
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
	})))
	var lo, hi atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := int64(s.InFlight())
			if n < lo.Load() {
				lo.Store(n)
			}
			if n > hi.Load() {
				hi.Store(n)
			}
		}
	})
	paths := []string{"/", "/panic", "/abort", "/"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := httptest.NewRequest(http.MethodGet, paths[(w+i)%len(paths)], nil)
				if i%3 == 0 {
					r.Header.Set(criticalHeader, "1")
				}
				func() {
					defer func() { recover() }() //nolint:errcheck // the handler's panics, on purpose
					h.ServeHTTP(httptest.NewRecorder(), r)
				}()
			}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	if lo.Load() < 0 || hi.Load() > capacity || s.InFlight() != 0 {
		t.Errorf("InFlight: got min %d, max %d, %d at the end; want >= 0, <= %d, 0", lo.Load(), hi.Load(), s.InFlight(), capacity)
	}
}

// Over HTTP/2, a client that resets its stream while the handler waits
// on the request's context frees the slot.
func TestReleaseOnHTTP2Reset(t *testing.T) {
	s := shed.New(1, shed.Options{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "not h2", http.StatusHTTPVersionNotSupported)
			return
		}
		if r.URL.Path == "/free" {
			return
		}
		entered <- struct{}{}
		<-r.Context().Done()
	})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { // joined below
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hold", nil)
		res, err := srv.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	<-done
	waitFor(t, "the slot to be free", func() bool { return s.InFlight() == 0 })
	res, err := srv.Client().Get(srv.URL + "/free")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Errorf("next request: got %d over HTTP/%d, want 200 over HTTP/2", res.StatusCode, res.ProtoMajor)
	}
}

// count returns how many events of e the recorder was told.
func (o *recorder) count(e shed.Event) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, ev := range o.events {
		if strings.HasPrefix(ev, e.String()+" ") {
			n++
		}
	}
	return n
}
