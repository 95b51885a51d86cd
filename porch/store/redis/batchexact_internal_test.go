package redis

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Goroutines hit three keys (one per
// algorithm) with weights 1-3, peeks, and take back half of what they were
// allowed, while another goroutine SCRIPT FLUSHes the server every few ms,
// so that luaBatch calls (views of busy keys) meet NOSCRIPT replays
// between take-backs of the same keys. Stored must equal allowed minus
// taken back, within what failed (which may or may not have applied), and
// never exceed the limit.
func TestParallelHitsTakeBacksAndScriptFlushStayExact(t *testing.T) {
	srv := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := Open(context.Background(), c, Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	const limit = 60
	rules := []driver.Rule{
		algorithm.MustRule(algorithm.Fixed, limit, time.Hour, 0),
		algorithm.MustRule(algorithm.Sliding, limit, time.Hour, 0),
		algorithm.MustRule(algorithm.GCRA, limit, 100*time.Hour, 0),
	}
	keys := []string{"rate:f:p:x", "rate:s:p:x", "rate:g:p:x"}
	type tl struct{ allowed, back, failedHit, failedBack atomic.Int64 }
	tallies := make([]*tl, 3)
	for i := range tallies {
		tallies[i] = &tl{}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				c.ScriptFlush(context.Background())
			}
		}
	})
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(3)
				if rng.IntN(5) == 0 {
					ch := make(chan error, 1)
					if err := s.PeekHit(keys[i], rules[i], func(_ driver.Hit, err error) { ch <- err }); err == nil {
						<-ch
					}
					continue
				}
				n := rng.Int64N(3) + 1
				type ans struct {
					h   driver.Hit
					err error
				}
				ch := make(chan ans, 1)
				if err := s.AddHit(keys[i], rules[i], n, driver.Lease{}, func(h driver.Hit, err error) { ch <- ans{h, err} }); err != nil {
					t.Error(err)
					return
				}
				a := <-ch
				switch {
				case a.err != nil:
					tallies[i].failedHit.Add(n)
					continue
				case !a.h.Allowed:
					continue
				}
				tallies[i].allowed.Add(n)
				if rng.IntN(2) == 0 {
					ech := make(chan error, 1)
					if err := s.TakeBack(keys[i], a.h.State.Start, n, func(err error) { ech <- err }); err != nil {
						t.Error(err)
						return
					}
					if err := <-ech; err != nil {
						tallies[i].failedBack.Add(n)
					} else {
						tallies[i].back.Add(n)
					}
				}
			}
		})
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	for i, k := range keys {
		st := stored(t, s, k)
		tl := tallies[i]
		a, b, fh, fb := tl.allowed.Load(), tl.back.Load(), tl.failedHit.Load(), tl.failedBack.Load()
		t.Logf("%s: stored %d, allowed %d, taken back %d, failed hits %d, failed take-backs %d", k, st, a, b, fh, fb)
		if lo, hi := a-b-fb, a-b+fh; st < lo || st > hi {
			t.Errorf("%s: stored %d outside [%d, %d]", k, st, lo, hi)
		}
		if st > limit {
			t.Errorf("%s: stored %d > limit %d", k, st, limit)
		}
	}
}
