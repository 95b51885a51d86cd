package postgres

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// A reset queued before a hit of the same key, neither waited for, is
// committed before it, and so is a take-back, while other goroutines do
// the same to other keys: per-key order (driver.SharedCounters). It guards
// any change that spreads keys over more than one committer: with one
// key's ops on two committers (tried in 54cb390 with resets and take-backs
// routed to the wrong one), the hit's batch now and then commits first and
// counts on top of the old window, and this test fails.
func TestResetAndTakeBackThenHitKeepTheirOrder(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	rule := fixed(1<<40, time.Hour)
	type res struct {
		h   driver.Hit
		err error
	}
	hit := func(key string) chan res {
		ch := make(chan res, 1)
		if err := p.AddHit(key, rule, 1, driver.Lease{}, func(h driver.Hit, err error) { ch <- res{h, err} }); err != nil {
			ch <- res{err: err}
		}
		return ch
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 10 {
				key := fmt.Sprintf("rate:t:order:%d:%d", g, r)
				var last res
				for range 3 {
					if last = <-hit(key); last.err != nil {
						t.Error(last.err)
						return
					}
				}
				// Queued back to back, answered later.
				if err := p.TakeBack(key, last.h.State.Start, 3, func(error) {}); err != nil {
					t.Error(err)
					return
				}
				if got := <-hit(key); got.err != nil || got.h.State.Count != 1 {
					t.Errorf("%s: a hit queued after taking back 3 of 3: count %d (%v), want 1", key, got.h.State.Count, got.err)
				}
				if err := p.ResetHit(key, func(error) {}); err != nil {
					t.Error(err)
					return
				}
				if got := <-hit(key); got.err != nil || got.h.State.Count != 1 {
					t.Errorf("%s: a hit queued after a reset: count %d (%v), want 1", key, got.h.State.Count, got.err)
				}
			}
		}()
	}
	wg.Wait()
}
