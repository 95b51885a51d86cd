package inflight_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store"
)

// Of limit+k requests of one client at once, exactly limit run and the
// others are refused 429, on every store; on a shared one the requests go
// through two instances. The handler holds every admitted request until
// all have been answered or admitted, so they truly overlap.
func TestExactlyLimitInFlight(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			const limit, total = 3, 11
			st, another := k.open(t)
			stores := []store.Slots{st}
			if another != nil {
				stores = append(stores, another(t))
			}
			g := newGate()
			var srvs []*httptest.Server
			for _, s := range stores {
				lim := inflight.New(newPool(t, porch.PoolOptions{}), s, limit, inflight.Options{})
				t.Cleanup(func() { lim.Close(context.Background()) })
				srv := httptest.NewServer(lim.Handler(g))
				t.Cleanup(srv.Close)
				srvs = append(srvs, srv)
			}
			statuses := make(chan int, total)
			var wg sync.WaitGroup
			for i := range total {
				wg.Go(func() { statuses <- get(t, srvs[i%len(srvs)]).StatusCode })
			}
			counts := map[int]int{}
			entered := 0
			for entered+counts[http.StatusTooManyRequests]+counts[http.StatusServiceUnavailable] < total {
				select {
				case <-g.entered:
					entered++
				case s := <-statuses:
					counts[s]++
				case <-time.After(30 * time.Second):
					t.Fatalf("after 30s: %d entered, answers %v", entered, counts)
				}
			}
			g.open()
			wg.Wait()
			close(statuses)
			for s := range statuses {
				counts[s]++
			}
			if counts[http.StatusCreated] != limit || counts[http.StatusTooManyRequests] != total-limit {
				t.Errorf("statuses %v, want %d×201 and %d×429", counts, limit, total-limit)
			}
			if p := g.peak(); p > limit {
				t.Errorf("%d requests ran at once, want at most %d", p, limit)
			}
		})
	}
}

// A refusal is a 429 problem+json with Retry-After and the RateLimit
// fields of the concurrent-requests quota; an admitted response carries
// the fields with the slots left.
func TestRefusalShape(t *testing.T) {
	st, _ := kinds[0].open(t)
	lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{Name: "checkout"})
	g := newGate()
	srv := httptest.NewServer(lim.Handler(g))
	defer srv.Close()
	first := make(chan *http.Response, 1)
	go func() {
		res, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-g.entered
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p porch.Problem
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"status", fmt.Sprint(res.StatusCode), "429"},
		{"Content-Type", res.Header.Get("Content-Type"), porch.ProblemContentType},
		{"type", p.Type, "https://porch.dev/problems/inflight-limited"},
		{"Retry-After", res.Header.Get("Retry-After"), "1"},
		{"RateLimit-Policy", res.Header.Get("RateLimit-Policy"), `"checkout";q=1;qu="concurrent-requests"`},
		{"RateLimit", res.Header.Get("RateLimit"), `"checkout";r=0`},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
	g.open()
	ok := <-first
	ok.Body.Close()
	if got, want := ok.Header.Get("RateLimit"), `"checkout";r=0`; got != want {
		t.Errorf("admitted RateLimit: got %q, want %q", got, want)
	}
}

// waitAdmitted polls until a request through h is served 200 (the slot a
// finished request held is back), failing t past a generous deadline.
func waitAdmitted(t *testing.T, h http.Handler) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not given back within 20s: last status %d", w.Code)
		}
		time.Sleep(5 * time.Millisecond) // polling for the give-back
	}
}

// The slot is given back however the handler ends: it returned, it
// panicked (through Handler and through a porch.Chain), or the client
// hung up, on every store.
func TestSlotGivenBack(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			st, _ := k.open(t)
			pool := newPool(t, porch.PoolOptions{})
			lim := inflight.New(pool, st, 1, inflight.Options{})
			t.Cleanup(func() { lim.Close(context.Background()) })
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
			t.Run("Panic", func(t *testing.T) {
				boom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
				func() {
					defer func() {
						if recover() == nil {
							t.Error("the handler's panic did not go on up")
						}
					}()
					lim.Handler(boom).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
				}()
				waitAdmitted(t, lim.Handler(ok))
			})
			t.Run("PanicInChain", func(t *testing.T) {
				boom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
				w := httptest.NewRecorder()
				porch.Chain(lim)(boom).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				if w.Code != http.StatusInternalServerError {
					t.Fatalf("status %d, want 500", w.Code)
				}
				waitAdmitted(t, porch.Chain(lim)(ok))
			})
			t.Run("HangUp", func(t *testing.T) {
				g := newGate()
				srv := httptest.NewServer(lim.Handler(g))
				defer srv.Close()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
					if res, err := srv.Client().Do(req); err == nil {
						res.Body.Close()
					}
				}()
				<-g.entered
				cancel()
				<-done
				waitAdmitted(t, lim.Handler(ok))
			})
		})
	}
}

// A limiter mounted twice on a route (Handler outside, a chain inside)
// takes one slot per request, not two.
func TestMountedTwiceTakesOneSlot(t *testing.T) {
	st, _ := kinds[0].open(t)
	lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
	h := lim.Handler(porch.Chain(lim)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: the inner mount took a second slot", w.Code)
	}
	waitAdmitted(t, h)
}

// A KeyFunc keys the slots; porch.ErrSkip exempts a request; another
// error answers 500.
func TestKeyFunc(t *testing.T) {
	st, _ := kinds[0].open(t)
	pool := newPool(t, porch.PoolOptions{})
	lim := inflight.New(pool, st, 1, inflight.Options{KeyFunc: func(r *http.Request) (string, error) {
		switch u := r.Header.Get("X-User"); u {
		case "skip":
			return "", porch.ErrSkip
		case "fail":
			return "", errors.New("lookup failed")
		default:
			return u, nil
		}
	}})
	release, err := lim.Acquire(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, c := range []struct {
		user string
		want int
	}{{"alice", 429}, {"bob", 200}, {"skip", 200}, {"fail", 500}} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-User", c.user)
		lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("user %q: status %d, want %d", c.user, w.Code, c.want)
		}
	}
	if _, err := lim.Acquire(context.Background(), "alice"); !errors.Is(err, inflight.ErrLimited) {
		t.Errorf("Acquire of a full key: %v, want ErrLimited", err)
	}
}

// New refuses a programming error with an "inflight: " panic.
func TestNewPanics(t *testing.T) {
	st, _ := kinds[0].open(t)
	pool := newPool(t, porch.PoolOptions{})
	for _, c := range []struct {
		name  string
		limit int
		opt   inflight.Options
	}{
		{"zero limit", 0, inflight.Options{}},
		{"bad name", 1, inflight.Options{Name: "a:b"}},
		{"lease in process", 1, inflight.Options{Lease: time.Minute}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if v := recover(); v == nil || !strings.HasPrefix(fmt.Sprint(v), "inflight: ") {
					t.Errorf("recovered %v, want an \"inflight: \" panic", v)
				}
			}()
			inflight.New(pool, st, c.limit, c.opt)
		})
	}
}
