package inflight_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Many goroutines hammer one key with Acquire through one limiter (two on
// a shared store): at no instant do more than limit hold a slot, and
// every slot comes back.
func TestNeverOverAdmitsUnderParallelism(t *testing.T) {
	for _, k := range kinds {
		for _, limit := range []int{1, 2, 3} {
			t.Run(k.name+"/"+string(rune('0'+limit)), func(t *testing.T) {
				st, another := k.open(t)
				stores := []store.Slots{st}
				if another != nil {
					stores = append(stores, another(t))
				}
				var lims []*inflight.Limiter
				for _, s := range stores {
					l := inflight.New(newPool(t, porch.PoolOptions{}), s, limit, inflight.Options{})
					t.Cleanup(func() { l.Close(context.Background()) })
					lims = append(lims, l)
				}
				var running, most, admitted atomic.Int64
				rounds := 60
				if k.shared {
					rounds = 15
				}
				var wg sync.WaitGroup
				for g := range 16 {
					wg.Go(func() {
						lim := lims[g%len(lims)]
						for range rounds {
							release, err := lim.Acquire(context.Background(), "alice")
							if errors.Is(err, inflight.ErrLimited) {
								continue
							}
							if err != nil {
								t.Error(err)
								return
							}
							admitted.Add(1)
							n := running.Add(1)
							for {
								m := most.Load()
								if n <= m || most.CompareAndSwap(m, n) {
									break
								}
							}
							time.Sleep(100 * time.Microsecond) // hold the slot a while
							running.Add(-1)
							release()
						}
					})
				}
				wg.Wait()
				if got := most.Load(); got > int64(limit) {
					t.Errorf("%d held at once, want at most %d", got, limit)
				}
				if admitted.Load() == 0 {
					t.Error("no acquire succeeded")
				}
				// Every slot is back: limit acquires succeed now.
				var rels []func()
				for i := range limit {
					rel, err := lims[i%len(lims)].Acquire(context.Background(), "alice")
					if err != nil {
						t.Fatalf("acquire %d after the storm: %v (a slot leaked)", i+1, err)
					}
					rels = append(rels, rel)
				}
				for _, r := range rels {
					r()
				}
			})
		}
	}
}

// headerCount returns how many values h has for name.
func headerCount(h http.Header, name string) int { return len(h.Values(name)) }

// A limiter mounted twice (Handler outside, a chain inside, and two
// chains) acts once: one slot, one pair of RateLimit fields, and the slot
// is held until the outer mount is done.
func TestMountedTwiceActsOnce(t *testing.T) {
	st, _ := kinds[0].open(t)
	lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"HandlerThenChain", lim.Handler(porch.Chain(lim)(ok))},
		{"ChainThenHandler", porch.Chain(lim)(lim.Handler(ok))},
		{"ChainThenChain", porch.Chain(lim)(porch.Chain(lim)(ok))},
		{"HandlerThenHandler", lim.Handler(lim.Handler(ok))},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", w.Code)
			}
			for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
				if n := headerCount(w.Header(), f); n != 1 {
					t.Errorf("%s: %d values %q, want 1", f, n, w.Header().Values(f))
				}
			}
			waitAdmitted(t, lim.Handler(ok))
		})
	}
}

// Inside an outer Handler mount, an inner chain's After must not give the
// slot back: the outer mount still runs (here: what follows the chain).
func TestInnerChainDoesNotReleaseOuterSlot(t *testing.T) {
	st, _ := kinds[0].open(t)
	lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
	var during int
	after := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			// The outer mount still holds the slot: another request of
			// the client must be refused now.
			rw := httptest.NewRecorder()
			lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rw, httptest.NewRequest(http.MethodGet, "/", nil))
			during = rw.Code
		})
	}
	h := lim.Handler(after(porch.Chain(lim)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if during != http.StatusTooManyRequests {
		t.Errorf("a second request while the outer mount runs: %d, want 429 (the inner chain gave the slot back)", during)
	}
}

// grantThenCancel is a shared store whose acquire is granted by the
// store at the instant the caller's context ends: the store takes the
// slot, and the call reports the context's end as its error (a reply the
// caller stopped waiting for).
type grantThenCancel struct {
	driver.SharedSlots
	cancel context.CancelFunc
}

func (s grantThenCancel) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (bool, int64, error) {
	ok, held, err := s.SharedSlots.AcquireSlot(context.WithoutCancel(ctx), key, id, limit, lease)
	s.cancel()
	if err == nil && ok {
		return false, 0, ctx.Err()
	}
	return ok, held, err
}

// grantOKThenCancel grants and answers the grant, with the caller's
// context already ended.
type grantOKThenCancel struct {
	driver.SharedSlots
	cancel context.CancelFunc
}

func (s grantOKThenCancel) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (bool, int64, error) {
	ok, held, err := s.SharedSlots.AcquireSlot(context.WithoutCancel(ctx), key, id, limit, lease)
	s.cancel()
	return ok, held, err
}

// An acquire the store grants at the instant the caller's context ends
// holds no slot once the caller has its answer: either it is told of the
// slot (and gives it back) or the slot is given back for it.
func TestGrantedAsContextEnds(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		for _, wrap := range []struct {
			name string
			of   func(driver.SharedSlots, context.CancelFunc) store.Slots
		}{
			{"ErrorAfterGrant", func(s driver.SharedSlots, c context.CancelFunc) store.Slots { return grantThenCancel{s, c} }},
			{"GrantAfterCancel", func(s driver.SharedSlots, c context.CancelFunc) store.Slots { return grantOKThenCancel{s, c} }},
		} {
			t.Run(k.name+"/"+wrap.name, func(t *testing.T) {
				st, _ := k.open(t)
				ctx, cancel := context.WithCancel(context.Background())
				lim := inflight.New(newPool(t, porch.PoolOptions{}), wrap.of(st.(driver.SharedSlots), cancel), 1, inflight.Options{})
				t.Cleanup(func() { lim.Close(context.Background()) })
				// Through the middleware: the request's context ends as
				// its slot is granted.
				r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
				ran := false
				lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).ServeHTTP(httptest.NewRecorder(), r)
				t.Logf("handler ran: %v", ran)
				clean := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
				t.Cleanup(func() { clean.Close(context.Background()) })
				waitAdmitted(t, clean.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			})
		}
	}
}

// Mounted inside an http.TimeoutHandler, as Handler's doc asks, the slot
// of a request the timeout answered is held until its handler returns:
// the work still runs, and another request of the client is refused.
func TestInsideTimeoutHandler(t *testing.T) {
	st, _ := kinds[0].open(t)
	lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{})
	stuck, done := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		<-stuck // ignores its context: runs on past the timeout
	})
	h := http.TimeoutHandler(lim.Handler(slow), 10*time.Millisecond, "timeout")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want the timeout's 503", w.Code)
	}
	ok := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w = httptest.NewRecorder()
	ok.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("while the timed-out handler runs on: status %d, want 429", w.Code)
	}
	close(stuck)
	<-done
	waitAdmitted(t, ok)
}

// panicky is an Observer that panics once on Admitted.
type panicky struct{ fired atomic.Bool }

func (p *panicky) InflightEvent(_ context.Context, _ string, e inflight.Event) {
	if e == inflight.Admitted && p.fired.CompareAndSwap(false, true) {
		panic("observer bug")
	}
}

// An Observer that panics as a slot is taken (the application's bug)
// does not leak the slot: through a porch.Chain the request is a 500,
// through Handler the panic goes on up, and either way the slot is back.
func TestObserverPanicLeaksNoSlot(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct {
		name  string
		mount func(*inflight.Limiter) http.Handler
	}{
		{"Chain", func(l *inflight.Limiter) http.Handler { return porch.Chain(l)(ok) }},
		{"Handler", func(l *inflight.Limiter) http.Handler { return l.Handler(ok) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := kinds[0].open(t)
			lim := inflight.New(newPool(t, porch.PoolOptions{}), st, 1, inflight.Options{Observer: &panicky{}})
			func() {
				defer func() { recover() }()
				c.mount(lim).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			}()
			waitAdmitted(t, lim.Handler(ok))
		})
	}
}

// slowFailing is a shared store out of reach: an acquire takes the slot
// and then fails at the store's timeout, as a lost reply does, and a
// give-back takes as long before it lands.
type slowFailing struct {
	driver.SharedSlots
	timeout  time.Duration
	released chan struct{}
}

func (s slowFailing) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (bool, int64, error) {
	s.SharedSlots.AcquireSlot(ctx, key, id, limit, lease) //nolint:errcheck // taken; the reply is "lost"
	time.Sleep(s.timeout)
	return false, 0, errors.New("store timeout")
}

func (s slowFailing) ReleaseSlot(ctx context.Context, key, id string) error {
	time.Sleep(s.timeout)
	err := s.SharedSlots.ReleaseSlot(ctx, key, id)
	select {
	case s.released <- struct{}{}:
	default:
	}
	return err
}

// A request whose acquire fails at the store's timeout is answered 503
// at that timeout, not one more timeout later for the give-back of the
// slot the acquire may have taken; that give-back still happens.
func TestFailedAcquireAnsweredWithinTimeout(t *testing.T) {
	for _, k := range kinds {
		if !k.shared {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			const timeout = time.Second
			st, _ := k.open(t)
			sf := slowFailing{st.(driver.SharedSlots), timeout, make(chan struct{}, 1)}
			lim := inflight.New(newPool(t, porch.PoolOptions{}), sf, 1, inflight.Options{})
			t.Cleanup(func() { lim.Close(context.Background()) })
			w := httptest.NewRecorder()
			start := time.Now()
			lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			took := time.Since(start)
			if w.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503", w.Code)
			}
			if took >= 2*timeout {
				t.Errorf("answered after %s, want within the store's timeout (%s), not two", took, timeout)
			}
			select {
			case <-sf.released:
			case <-time.After(20 * time.Second):
				t.Fatal("the slot the failed acquire may have taken was never given back")
			}
		})
	}
}
