package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// memResult is one memory run: the porch SQLite server's RSS before,
// after keys distinct client keys, and after their windows expired.
type memResult struct {
	keys                             int
	err                              error
	baseline, afterKeys, afterExpiry int64 // RSS, bytes
	heapBase, heapKeys, heapExpiry   uint64
	driveRate                        float64 // requests/s while the keys were sent
	trickle                          int     // requests sent after expiry to let the view forget
}

// Memory runs send from memConns connections; the trickle comes from
// trickleKeys addresses, enough that every actor of the pool gets a nearly
// equal share of it.
const (
	memConns    = 64
	trickleKeys = 4096
)

// distinctIP is the i-th of 2^22 addresses in 100.64.0.0/10.
func distinctIP(i int) string {
	return "100." + strconv.Itoa(64+i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// trickleIP is the i-th trickle address, in 198.18.0.0/20.
func trickleIP(i int) string {
	i %= trickleKeys
	return "198.18." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&255)
}

// memory measures the porch SQLite server's RSS (after FreeOSMemory) at
// baseline, after keys distinct client keys, and once their windows have
// expired. Expiry is simulated by moving the server's clock past the window;
// the view forgets a few closed windows per hit on the same actor, so a
// trickle of requests from other clients follows, sized for every actor to
// have let go of all its expired keys.
func (h *harness) memory(keys int) memResult {
	res := memResult{keys: keys}
	s, err := startServer(h.cfg.server, "-mode", "porch-sqlite", "-trust-proxy", "-debug-clock",
		"-window", h.cfg.memWindow.String())
	if err != nil {
		res.err = err
		return res
	}
	defer s.stop()
	step := func(what string, f func() error) bool {
		if res.err == nil {
			if err := f(); err != nil {
				res.err = fmt.Errorf("%s: %w", what, err)
			}
		}
		return res.err == nil
	}
	measure := func(rss *int64, heap *uint64) func() error {
		return func() error {
			var err error
			if *rss, err = s.rss(); err != nil {
				return err
			}
			st, err := s.stats()
			*heap = st.HeapInuse
			return err
		}
	}
	warm := 4 * trickleKeys
	start := time.Now()
	_ = step("warm up", func() error { return blast(s, warm, trickleIP) }) &&
		step("baseline", measure(&res.baseline, &res.heapBase)) &&
		step("drive keys", func() error { start = time.Now(); return blast(s, keys, distinctIP) }) &&
		step("after keys", func() error {
			res.driveRate = float64(keys) / time.Since(start).Seconds()
			if time.Since(start) >= h.cfg.memWindow {
				return fmt.Errorf("sending the keys took %s, longer than -mem-window %s", time.Since(start), h.cfg.memWindow)
			}
			return measure(&res.afterKeys, &res.heapKeys)()
		}) &&
		step("expire", func() error {
			r, err := s.post("/debug/advance?by=" + (h.cfg.memWindow + time.Second).String())
			if err == nil && r.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", r.StatusCode)
			}
			return err
		}) &&
		step("trickle", func() error {
			// forget lets go of up to 4 closed windows per hit on an actor;
			// 0.4 hits per key covers the least-served actor with margin.
			res.trickle = keys*2/5 + warm
			return blast(s, res.trickle, trickleIP)
		}) &&
		step("after expiry", measure(&res.afterExpiry, &res.heapExpiry))
	return res
}

// blast sends n GET / requests from memConns connections, the i-th from
// X-Forwarded-For ip(i), and fails unless every one is answered 200.
func blast(s *server, n int, ip func(i int) string) error {
	tr := &http.Transport{MaxIdleConnsPerHost: memConns, MaxConnsPerHost: memConns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := s.url("/")
	var next, failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range memConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Forwarded-For", ip(i))
				res, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, res.Body) //nolint:errcheck // only the status matters
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d requests failed, first: %v", f, n, first.Load())
	}
	return nil
}
