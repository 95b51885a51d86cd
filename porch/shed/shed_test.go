package shed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/porch/shed"
)

// thresholdCases are capacities and reserves with the requests each
// admits: nonCritical while no request is critical, and capacity in all.
var thresholdCases = []struct {
	capacity    int
	reserve     float64
	nonCritical int
}{
	{4, 0.5, 2}, // the storefront's contract
	{4, 0, 4},
	{10, 0.25, 8},   // 7.5 rounds in favour of the non-critical: 2 reserved
	{100, 0.29, 71}, // 100×0.29 is 28.999999999999996 in binary: 29 reserved
	{10, 0.7, 3},
	{3, 0.5, 2},
	{1, 0.5, 1}, // ⌊0.5⌋ = 0 reserved: an idle instance admits anything
	{2, 0.999, 1},
	{1000, 0.1, 900},
}

// Requests sent one after another, each held until the end: requests
// that are not critical are admitted up to the threshold and refused
// past it, critical ones up to the capacity, and nothing past it.
func TestThresholds(t *testing.T) {
	for _, tt := range thresholdCases {
		t.Run(fmt.Sprintf("N=%d,F=%g", tt.capacity, tt.reserve), func(t *testing.T) {
			s := shed.New(tt.capacity, shed.Options{Reserve: tt.reserve, Critical: byHeader})
			f := newFlight(t, s, s.Handler, tt.capacity+2)
			for i := range tt.nonCritical {
				if !f.send(t, false) {
					t.Fatalf("non-critical request %d with %d in flight: refused, want admitted", i+1, i)
				}
			}
			if f.send(t, false) {
				t.Fatalf("non-critical request with %d in flight: admitted, want refused", tt.nonCritical)
			}
			for i := tt.nonCritical; i < tt.capacity; i++ {
				if !f.send(t, true) {
					t.Fatalf("critical request with %d in flight: refused, want admitted", i)
				}
			}
			if f.send(t, true) {
				t.Fatalf("critical request with %d in flight: admitted, want refused", tt.capacity)
			}
			if got := s.InFlight(); got != tt.capacity {
				t.Errorf("InFlight: got %d, want %d", got, tt.capacity)
			}
			f.land()
			if got := s.InFlight(); got != 0 {
				t.Errorf("InFlight once every request returned: got %d, want 0", got)
			}
		})
	}
}

// A burst of requests released together on every core: exactly the
// threshold of those that are not critical is admitted, exactly the
// capacity of critical ones, and in a mixed burst never more
// non-critical than the threshold nor more in all than the capacity.
func TestBurstExact(t *testing.T) {
	const capacity, reserve, threshold, burst = 8, 0.5, 4, 64
	for _, tt := range []struct {
		name         string
		critical     func(i int) bool
		wantAdmitted int
	}{
		{"none critical", func(int) bool { return false }, threshold},
		{"all critical", func(int) bool { return true }, capacity},
		{"half critical", func(i int) bool { return i%2 == 0 }, capacity},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for round := range 20 {
				s := shed.New(capacity, shed.Options{Reserve: reserve, Critical: byHeader})
				f := newFlight(t, s, s.Handler, burst)
				start := make(chan struct{})
				var ready sync.WaitGroup
				for i := range burst {
					ready.Add(1)
					f.wg.Go(func() {
						r := request(tt.critical(i))
						ready.Done()
						<-start
						rec := httptest.NewRecorder()
						f.h.ServeHTTP(rec, r)
						if rec.Code != http.StatusNoContent {
							f.refused <- rec
						}
					})
				}
				ready.Wait()
				close(start)
				admitted, nonCritical := 0, 0
				for range burst { // every request is admitted or refused while none returns
					select {
					case critical := <-f.held.entered:
						admitted++
						if !critical {
							nonCritical++
						}
					case <-f.refused:
					}
				}
				if admitted != tt.wantAdmitted || nonCritical > threshold {
					t.Fatalf("round %d: got %d admitted, %d of them not critical; want %d, at most %d not critical",
						round, admitted, nonCritical, tt.wantAdmitted, threshold)
				}
				f.land()
			}
		})
	}
}

// Requests of both classes arriving and leaving on every core for a
// while: the handlers never see more than the capacity running at once,
// nor more than the threshold of those that are not critical.
func TestChurnNeverPastThresholds(t *testing.T) {
	const capacity, reserve, threshold, workers, each = 6, 0.5, 3, 32, 400
	s := shed.New(capacity, shed.Options{Reserve: reserve, Critical: byHeader})
	var running, runningNon, maxRunning, maxNon atomic.Int64
	raise := func(m *atomic.Int64, v int64) {
		for {
			old := m.Load()
			if v <= old || m.CompareAndSwap(old, v) {
				return
			}
		}
	}
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A counter raised inside the handler and lowered before it
		// returns never exceeds the shedder's own count.
		raise(&maxRunning, running.Add(1))
		if !byHeader(r) {
			raise(&maxNon, runningNon.Add(1))
			defer runningNon.Add(-1)
		}
		defer running.Add(-1)
		for range 5 {
			runtime.Gosched() // let other requests in, so that they overlap
		}
	}))
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, request((w+i)%3 == 0))
				if rec.Code == http.StatusServiceUnavailable {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := maxRunning.Load(); got > capacity {
		t.Errorf("requests running at once: got %d, want at most %d", got, capacity)
	}
	if got := maxNon.Load(); got > threshold {
		t.Errorf("non-critical requests running at once: got %d, want at most %d", got, threshold)
	}
	if got := s.InFlight(); got != 0 {
		t.Errorf("InFlight after the churn: got %d, want 0", got)
	}
	t.Logf("%d of %d refused; at most %d running, %d not critical", refused.Load(), workers*each, maxRunning.Load(), maxNon.Load())
}

// A refusal is 503 problem+json of a stable type, with Retry-After in
// whole seconds rounded up (1 by default), and says which capacity the
// request met.
func TestRefusal(t *testing.T) {
	for _, tt := range []struct {
		name       string
		retryAfter time.Duration
		critical   bool
		want       string
	}{
		{"default", 0, false, "1"},
		{"critical", 0, true, "1"},
		{"rounded up", 2500 * time.Millisecond, false, "3"},
		{"under a second", time.Millisecond, true, "1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := shed.New(1, shed.Options{Critical: byHeader, RetryAfter: tt.retryAfter})
			f := newFlight(t, s, s.Handler, 2)
			if !f.send(t, true) {
				t.Fatal("first request refused")
			}
			f.start(request(tt.critical))
			rec := <-f.refused
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status: got %d, want 503", rec.Code)
			}
			for name, want := range map[string]string{
				"Content-Type":   "application/problem+json",
				"Retry-After":    tt.want,
				"Content-Length": fmt.Sprint(rec.Body.Len()),
			} {
				if got := rec.Header().Get(name); got != want {
					t.Errorf("%s: got %q, want %q", name, got, want)
				}
			}
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if p.Type != "https://porch.dev/problems/overloaded" || p.Status != 503 || p.Title != "Service Unavailable" || p.Detail == "" {
				t.Errorf("body: got %+v, want the overloaded problem, status 503, with a detail", p)
			}
		})
	}
}

// A handler that panics gives its slot back: the panic goes on up (to
// net/http or a recoverer) and the next request is admitted.
func TestReleaseOnPanic(t *testing.T) {
	s := shed.New(1, shed.Options{})
	h := s.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	for i := range 3 {
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Fatalf("request %d: recovered %v, want the handler's panic", i, v)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), request(false))
		}()
		if got := s.InFlight(); got != 0 {
			t.Fatalf("after panic %d: InFlight got %d, want 0", i, got)
		}
	}
}

// The handler of a client that hung up gives up on its context and
// returns without writing a byte; its slot is free again, over a real
// connection.
func TestReleaseOnHangUp(t *testing.T) {
	s := shed.New(1, shed.Options{})
	entered := make(chan struct{})
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/free" {
			return
		}
		close(entered)
		<-r.Context().Done() // gives up with the client, writing nothing
	})))
	t.Cleanup(srv.Close)
	ctx, hangUp := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { // joined below
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hold", nil)
		_, err := srv.Client().Do(req)
		done <- err
	}()
	<-entered
	hangUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung-up request: got %v, want context.Canceled", err)
	}
	waitFor(t, "the slot to be free", func() bool { return s.InFlight() == 0 })
	res, err := srv.Client().Get(srv.URL + "/free")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("next request: got %d, want 200", res.StatusCode)
	}
}

// A request that runs out of time gives its slot back when its handler
// returns: one whose context deadline passed (chi's middleware.Timeout,
// mounted further out, as a router's r.Use would), and one that
// http.TimeoutHandler, further in, answered 503 in its handler's place.
func TestReleaseOnTimeout(t *testing.T) {
	for _, tt := range []struct {
		name  string
		mount func(s *shed.Shedder, h http.Handler) http.Handler
		want  int
	}{
		{"context deadline", func(s *shed.Shedder, h http.Handler) http.Handler {
			return middleware.Timeout(time.Millisecond)(s.Handler(h))
		}, http.StatusGatewayTimeout},
		{"http.TimeoutHandler", func(s *shed.Shedder, h http.Handler) http.Handler {
			return s.Handler(http.TimeoutHandler(h, time.Millisecond, "late"))
		}, http.StatusServiceUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := shed.New(1, shed.Options{})
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			h := tt.mount(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-stuck: // a handler that ignores its context: TimeoutHandler answers for it
				}
			}))
			for i := range 3 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, request(false))
				if rec.Code != tt.want {
					t.Fatalf("request %d: got %d, want %d (the timeout's answer, not a refusal)", i, rec.Code, tt.want)
				}
				if got := s.InFlight(); got != 0 {
					t.Fatalf("after timeout %d: InFlight got %d, want 0", i, got)
				}
			}
		})
	}
}

// An exempt request is neither counted nor refused, even at capacity.
func TestExempt(t *testing.T) {
	s := shed.New(1, shed.Options{Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" }})
	f := newFlight(t, s, s.Handler, 2)
	if !f.send(t, false) {
		t.Fatal("first request refused")
	}
	var inside int
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inside = s.InFlight() }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || inside != 1 {
		t.Errorf("/healthz at capacity: got %d with %d in flight inside, want 200 with 1 (itself not counted)", rec.Code, inside)
	}
}

// Critical mounted per route admits into the reserve, and a request that
// meets the Shedder twice (Handler on the router, Critical on the route)
// is counted once, by the mount further out.
func TestCriticalRoutes(t *testing.T) {
	s := shed.New(2, shed.Options{Reserve: 0.5})
	held := newHolder(4)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the release below: cleanups run last first
	t.Cleanup(func() { close(held.release) })
	var inside atomic.Int64
	r := chi.NewRouter()
	r.With(s.Handler).Get("/list", held.ServeHTTP)
	r.With(s.Critical).Post("/pay", held.ServeHTTP)
	r.With(s.Handler, s.Critical).Get("/twice", func(w http.ResponseWriter, r *http.Request) {
		inside.Store(int64(s.InFlight()))
	})
	serve := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec
	}
	if rec := serve(http.MethodGet, "/twice"); rec.Code != http.StatusOK || inside.Load() != 1 {
		t.Fatalf("mounted twice: got %d with %d in flight inside, want 200 with 1", rec.Code, inside.Load())
	}
	wg.Go(func() { serve(http.MethodGet, "/list") })
	<-held.entered
	if rec := serve(http.MethodGet, "/list"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /list with 1 of 2 in flight and 1 reserved: got %d, want 503", rec.Code)
	}
	wg.Go(func() { serve(http.MethodPost, "/pay") })
	<-held.entered
	if rec := serve(http.MethodPost, "/pay"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("POST /pay at capacity: got %d, want 503", rec.Code)
	}
}

// New refuses a programming error with a "shed: " panic.
func TestNewPanics(t *testing.T) {
	for _, tt := range []struct {
		name     string
		capacity int
		opts     shed.Options
	}{
		{"zero capacity", 0, shed.Options{}},
		{"negative capacity", -1, shed.Options{}},
		{"reserve 1", 4, shed.Options{Reserve: 1}},
		{"negative reserve", 4, shed.Options{Reserve: -0.1}},
		{"NaN reserve", 4, shed.Options{Reserve: nan()}},
		{"negative RetryAfter", 4, shed.Options{RetryAfter: -time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if v, ok := recover().(string); !ok || len(v) < 6 || v[:6] != "shed: " {
					t.Errorf("got panic %v, want one starting \"shed: \"", v)
				}
			}()
			shed.New(tt.capacity, tt.opts)
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu     sync.Mutex // protects events
	events []string
}

func (o *recorder) ShedEvent(_ context.Context, e shed.Event, critical bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf("%s critical=%t", e, critical))
}

// The Observer is told each admission and its release, each refusal, with
// the request's class; nothing of an exempt request.
func TestObserver(t *testing.T) {
	obs := &recorder{}
	s := shed.New(2, shed.Options{Reserve: 0.5, Critical: byHeader, Observer: obs,
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" }})
	f := newFlight(t, s, s.Handler, 3)
	f.send(t, false)
	f.send(t, false)
	f.send(t, true)
	f.send(t, true)
	s.Handler(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	f.land()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []string{"admitted critical=false", "refused critical=false", "admitted critical=true", "refused critical=true"}
	if len(obs.events) != 6 {
		t.Fatalf("got %q, want %q then two releases", obs.events, want)
	}
	for i, w := range want {
		if obs.events[i] != w {
			t.Errorf("event %d: got %q, want %q", i, obs.events[i], w)
		}
	}
	released := map[string]bool{obs.events[4]: true, obs.events[5]: true}
	if !released["released critical=false"] || !released["released critical=true"] {
		t.Errorf("releases: got %q, want one of each class", obs.events[4:])
	}
	if got := shed.Event(9).String(); got != "shed.Event(9)" {
		t.Errorf("unknown event: got %q", got)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
