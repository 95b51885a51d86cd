package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"
)

// BenchmarkHTTPRateAllocs is go-chi/httprate in the harness's setup (LimitBy
// on the client address, 1e9 per hour) under the same httptest loop as
// porch/rate's BenchmarkLimiterHTTP/Handler, so that their allocations per
// request can be read side by side.
func BenchmarkHTTPRateAllocs(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	for _, km := range []struct {
		name    string
		clients int
	}{{"one-key", 1}, {"many-keys", 65536}} {
		addrs := make([]string, km.clients)
		for i := range addrs {
			addrs[i] = "198." + strconv.Itoa(18+i/65536%2) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256) + ":40000"
		}
		b.Run(km.name, func(b *testing.B) {
			h := httprate.LimitBy(1_000_000_000, time.Hour, clientIP)(ok)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r.RemoteAddr = addrs[int(next.Add(1))%len(addrs)]
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Errorf("status %d", w.Code)
						return
					}
				}
			})
		})
	}
}
