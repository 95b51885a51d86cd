package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

var modes = []string{"none", "httprate", "naive", "naive-postgres", "floor-sqlite", "porch-sqlite", "porch-postgres", "porch-idem"}

func validMode(m string) bool { return slices.Contains(modes, m) }

// statser is what /debug/stats reports the commit counters of.
type statser interface{ Stats() store.Stats }

// ok is the handler every mode serves.
func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// newServer builds the App for cfg.mode: the debug routes at the root, and
// "/" behind the mode's limiter. What the mode opened is closed by the
// App's shutdown.
func newServer(ctx context.Context, cfg config) (*porch.App, error) {
	app := porch.New()
	var clk clock.Clock = clock.System{}
	skip := &skipClock{start: time.Now()}
	if cfg.debugClock {
		clk = skip
	}
	limiter, stats, err := newLimiter(ctx, cfg, app, clk)
	if err != nil {
		app.Close(context.Background())
		return nil, err
	}
	app.Get("/debug/stats", statsHandler(stats))
	app.Post("/debug/free", func(w http.ResponseWriter, _ *http.Request) {
		debug.FreeOSMemory()
		w.WriteHeader(http.StatusNoContent)
	})
	if cfg.debugClock {
		app.Post("/debug/advance", skip.advanceHandler)
	}
	if cfg.pprof {
		app.HandleFunc("/debug/pprof/*", pprof.Index)
		app.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		app.HandleFunc("/debug/pprof/profile", pprof.Profile)
		app.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		app.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	app.Group(func(r chi.Router) {
		if cfg.trustProxy {
			r.Use(middleware.ClientIPFromXFFTrustedProxies(1))
		}
		if limiter != nil {
			r.Use(limiter)
		}
		r.HandleFunc("/", ok)
	})
	return app, nil
}

// newLimiter opens what cfg.mode needs, registers its closers on app, and
// returns the middleware (nil for none) and what reports commit counters
// (nil when nothing commits).
func newLimiter(ctx context.Context, cfg config, app *porch.App, clk clock.Clock) (func(http.Handler) http.Handler, statser, error) {
	if open, ok := redisModes[cfg.mode]; ok {
		return open(ctx, cfg, app, clk)
	}
	if open, ok := inflightModes[cfg.mode]; ok {
		return open(ctx, cfg, app, clk)
	}
	switch cfg.mode {
	case "none":
		return nil, nil, nil
	case "httprate":
		return httprate.LimitBy(cfg.limit, cfg.window, clientIP), nil, nil
	case "naive":
		n, err := openNaive(cfg.db, int64(cfg.limit), cfg.window)
		if err != nil {
			return nil, nil, err
		}
		app.OnShutdown(n.Close)
		return n.Handler, n, nil
	case "naive-postgres":
		n, err := openNaivePG(ctx, cfg.postgres, int64(cfg.limit), cfg.durability, app)
		if err != nil {
			return nil, nil, err
		}
		return n.Handler, n, nil
	case "floor-sqlite":
		f, err := openFloor(cfg.db, int64(cfg.limit), cfg.durability, defaultPool*cfg.mailbox, cfg.floorGather)
		if err != nil {
			return nil, nil, err
		}
		app.OnShutdown(f.Close)
		return f.Handler, f, nil
	}
	pool := porch.NewPool(porch.PoolOptions{Size: cfg.pool, Mailbox: cfg.mailbox})
	opt := store.Options{Clock: clk, QueueSize: pool.Size() * cfg.mailbox, Durability: cfg.durability}
	var st interface {
		driver.KeyStore
		driver.Counters
	}
	if cfg.mode == "porch-postgres" {
		pg, err := openPostgres(ctx, cfg.postgres, opt, app)
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		st = pg
	} else {
		sq, err := sqlite.Open(cfg.db, sqlite.Options{Options: opt})
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		app.OnShutdown(sq.Close)
		st = sq
	}
	app.OnShutdown(pool.Close) // runs before the store's Close: the pool's last jobs write
	if cfg.mode == "porch-idem" {
		m := idem.New(pool, st, idem.Options{})
		return m.Handler, st, nil
	}
	lim, err := rate.New(pool, st, cfg.limit, cfg.window, rate.Options{TrustProxy: cfg.trustProxy, Algorithm: cfg.algorithm, Burst: cfg.burst, Lease: cfg.lease})
	if err != nil {
		return nil, nil, err
	}
	app.OnShutdown(lim.Close) // runs before the pool's Close: exact counts on the way out
	if cfg.chain {
		return lim.Handler, st, nil
	}
	return lim.Handler, st, nil
}

// clientIP keys httprate and the naive limiter as porch keys its limiter:
// the address chi's client-IP middleware resolved, else the peer.
func clientIP(r *http.Request) (string, error) {
	if ip := middleware.GetClientIPAddr(r.Context()); ip.IsValid() {
		return ip.String(), nil
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String(), nil
	}
	return r.RemoteAddr, nil
}

// stats is the body of GET /debug/stats.
type stats struct {
	Commits     int64   `json:"commits"`
	Writes      int64   `json:"writes"`
	Failed      int64   `json:"failed"`
	MeanBatch   float64 `json:"mean_batch"`
	HeapInuse   uint64  `json:"heap_inuse"`
	HeapObjects uint64  `json:"heap_objects"`
	Goroutines  int     `json:"goroutines"`
}

func statsHandler(s statser) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var out stats
		if s != nil {
			st := s.Stats()
			out = stats{Commits: st.Commits, Writes: st.Writes, Failed: st.Failed, MeanBatch: meanBatch(st)}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		out.HeapInuse, out.HeapObjects, out.Goroutines = ms.HeapInuse, ms.HeapObjects, runtime.NumGoroutine()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out) //nolint:errcheck // the harness went away
	}
}

// skipClock is the system clock that POST /debug/advance moves forward, so
// the memory run can let a long window expire without waiting for it. It is
// used only with -debug-clock; otherwise clock.System is.
type skipClock struct {
	skip  atomic.Int64 // nanoseconds added to both readings
	start time.Time
}

// Wall reads the wall clock plus the skip.
func (c *skipClock) Wall() time.Time {
	return time.Now().Add(time.Duration(c.skip.Load())).Round(0)
}

// Monotonic reads the monotonic clock plus the skip.
func (c *skipClock) Monotonic() time.Duration {
	return time.Since(c.start) + time.Duration(c.skip.Load())
}

func (c *skipClock) advanceHandler(w http.ResponseWriter, r *http.Request) {
	by, err := time.ParseDuration(r.URL.Query().Get("by"))
	if err != nil || by < 0 {
		http.Error(w, "by must be a non-negative duration", http.StatusBadRequest)
		return
	}
	c.skip.Add(int64(by))
	fmt.Fprintf(w, "advanced %s\n", by)
}

// meanBatch is the mean number of writes a commit carried.
func meanBatch(st store.Stats) float64 {
	if st.Commits == 0 {
		return 0
	}
	return float64(st.Writes) / float64(st.Commits)
}
