package idem

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// A flight that ended stays on its shard's ended list (and in the actor's
// map) until that shard's next join. Held strongly there, on a shard that
// gets no more keyed requests the stored responses of up to 256 flights a
// shard (each up to MaxStoredBody, 1 MiB by default; 16 shards: up to
// 4 GiB) would stay reachable for ever; held weakly, they go once every
// request is over.
func TestEndedFlightsLetTheirResponsesGoOnAnIdleShard(t *testing.T) {
	m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const n = 32
	var bodies []weak.Pointer[[1 << 20]byte]
	for i := range n {
		f, leads, err := m.begin(ctx, fmt.Sprintf("k%d", i))
		if err != nil || !leads {
			t.Fatalf("begin: leads %v, err %v", leads, err)
		}
		body := new([1 << 20]byte)
		bodies = append(bodies, weak.Make(body))
		m.finish(f, stored(driver.Response{Key: f.key, Status: 200, Body: body[:]}))
	}
	// Every request is over; nothing else arrives.
	// m stays in use, as a server's middleware does.
	defer runtime.KeepAlive(m)
	deadline := time.Now().Add(2 * time.Second)
	for {
		runtime.GC()
		live := 0
		for _, b := range bodies {
			if b.Value() != nil {
				live++
			}
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d finished flights' 1 MiB responses still reachable after every request ended (idle shards keep their ended flights)", live, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// 600 flights of one shard end at once
// (more than its ended list holds, so some fall back to the actor's
// message) while duplicates of the same keys join; afterwards no key is
// left led, and every key leads afresh.
func TestManyEndsRacingJoinsLeaveNoKeyLed(t *testing.T) {
	m := newMiddleware(t, openSQLite(t), Options{}, porch.PoolOptions{Size: 1})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const n = 600
	fs := make([]*flight, n)
	for i := range n {
		f, leads, err := m.begin(ctx, fmt.Sprintf("k%d", i))
		if err != nil || !leads {
			t.Fatalf("begin: leads %v, err %v", leads, err)
		}
		fs[i] = f
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { m.finish(fs[i], released()) })
		wg.Go(func() {
			f, leads, err := m.begin(ctx, fmt.Sprintf("k%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if leads {
				m.finish(f, released())
				return
			}
			select {
			case <-f.done:
			case <-ctx.Done():
				t.Error("waiter never woken")
			}
		})
	}
	wg.Wait()
	if got := inFlight(t, m); got != 0 {
		t.Fatalf("flights after all ended: %d", got)
	}
	for i := range n {
		if _, leads, err := m.begin(ctx, fmt.Sprintf("k%d", i)); err != nil || !leads {
			t.Fatalf("k%d: leads %v, err %v", i, leads, err)
		}
	}
}
