package rate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// Stress of the counting engine's layers together (refusal cache >
// leases > store): two instances with leases, weighted requests over a few
// keys near their limit (a lease that does not fit is retried without
// one), and a third of the served requests failing with a 500 that
// CountStatus gives back (into the lease, adopted, or to the store). No
// request may be answered 503, no key may hold more than its limit net of
// the give-backs, and once both instances close the store must hold, per
// key, exactly the weight of the served requests that were not given
// back: a record reused while a hit still needed it, a held count lost or
// doubled on a retry, adopt or redo, would show here.
func TestLayersStayExactUnderTakeBacks(t *testing.T) {
	for name, opener := range sharedOpeners(time.Hour) {
		t.Run(name, func(t *testing.T) {
			const limit, lease, keys, goroutines, perGoroutine = 300, 16, 4, 8, 80
			open := opener(t)
			opt := rate.Options{
				Name:        "layers-stress",
				Lease:       lease,
				KeyFunc:     func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
				Weight:      func(r *http.Request) int { w, _ := strconv.Atoi(r.Header.Get("X-W")); return w },
				CountStatus: rate.Successes,
			}
			lims := []*rate.Limiter{open(limit, opt), open(limit, opt)}
			peek := open(limit, rate.Options{Name: opt.Name})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				code, _ := strconv.Atoi(r.Header.Get("X-Status"))
				w.WriteHeader(code)
			})
			var (
				mu      sync.Mutex
				net     = map[string]int64{} // served and kept: the weight the store must hold
				codes   = map[int]int{}
				wg      sync.WaitGroup
				release = make(chan struct{})
			)
			for i, lim := range lims {
				mw := lim.Handler(h)
				for g := range goroutines {
					rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
					wg.Go(func() {
						<-release
						for range perGoroutine {
							key := fmt.Sprintf("k%d", rng.IntN(keys))
							weight := 1 + rng.IntN(3)
							status := http.StatusOK
							if rng.IntN(3) == 0 {
								status = http.StatusInternalServerError
							}
							req := httptest.NewRequest(http.MethodGet, "/", nil)
							req.Header.Set("X-Key", key)
							req.Header.Set("X-W", strconv.Itoa(weight))
							req.Header.Set("X-Status", strconv.Itoa(status))
							rec := httptest.NewRecorder()
							mw.ServeHTTP(rec, req)
							mu.Lock()
							codes[rec.Code]++
							if rec.Code == http.StatusOK {
								net[key] += int64(weight)
							}
							if got := rec.Header().Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
								t.Errorf("%s: X-RateLimit-Limit %q, want %d: another hit's verdict?", key, got, limit)
							}
							mu.Unlock()
						}
					})
				}
			}
			close(release)
			wg.Wait()
			if codes[http.StatusServiceUnavailable] > 0 {
				t.Errorf("answers %v: a 503 with no store failure", codes)
			}
			for _, lim := range lims {
				closeLimiter(t, lim)
			}
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				if net[key] > limit {
					t.Errorf("%s: %d kept, over the limit of %d", key, net[key], limit)
				}
				if got := stored(t, peek, limit, key); got != net[key] {
					t.Errorf("%s: after Close the store holds %d, want the %d served and kept", key, got, net[key])
				}
			}
			t.Logf("answers %v, kept %v", codes, net)
		})
	}
}

// Stress of the leases' Reset paths: hits waiting for a key's trip
// for a lease are decided again after a Reset (drop), and a trip that lands
// under a generation a Reset ended hands its retried hit back (rehit). With
// Resets racing weighted hits on both instances, every request must be
// answered once, none 503, and Close must give every lease back without
// error; under -race a record reused while still referenced shows as a race
// or as a request that never returns.
func TestResetsRacingLeasedHits(t *testing.T) {
	for name, opener := range sharedOpeners(time.Hour) {
		t.Run(name, func(t *testing.T) {
			const limit, lease, keys, perInstance = 40, 8, 3, 300
			open := opener(t)
			opt := rate.Options{Name: "leased-reset", Lease: lease}
			lims := []*rate.Limiter{open(limit, opt), open(limit, opt)}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				errs    = map[string]int{}
				release = make(chan struct{})
				stop    = make(chan struct{})
				rw      sync.WaitGroup // the resetting goroutines
			)
			for i, lim := range lims {
				for j := range perInstance {
					rng := rand.New(rand.NewPCG(uint64(i)+7, uint64(j)))
					key := fmt.Sprintf("k%d", rng.IntN(keys))
					weight := 1 + rng.IntN(3)
					wg.Go(func() {
						<-release
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						if _, err := lim.AllowN(ctx, key, weight); err != nil {
							mu.Lock()
							errs[err.Error()]++
							mu.Unlock()
						}
					})
				}
				rw.Go(func() {
					<-release
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := lim.Reset(context.Background(), fmt.Sprintf("k%d", n%keys)); err != nil {
							t.Errorf("Reset: %v", err)
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
			close(release)
			wg.Wait()
			close(stop)
			rw.Wait()
			if len(errs) > 0 {
				t.Errorf("errors answered: %v", errs)
			}
			for _, lim := range lims {
				closeLimiter(t, lim)
			}
		})
	}
}
