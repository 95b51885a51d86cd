package porch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// Serve serves on l until ctx ends or [App.StopNow] is called, then stops in
// three steps, each with its own budget, so that none can spend another's:
//
//  1. drain: stop accepting and wait for in-flight requests, for at most
//     DrainTimeout (none when StopNow was called);
//  2. if that ran out, close every connection left and wait at most
//     CloseTimeout for their handlers to return;
//  3. run the closers registered with OnShutdown, each with CloseTimeout.
//
// A step that runs out of time is logged by name. Connections cut short in
// step 2 are not an error: Serve returns the listener's error, if it failed,
// and the closers' errors, so nil means the app's state was flushed.
func (a *App) Serve(ctx context.Context, l net.Listener) error {
	stop, _ := a.stopper()
	running := &inflight{}
	srv := a.server(running)
	if n := orDefault(a.MaxConns, defaultMaxConns); n > 0 {
		ll := newLimitListener(l, n)
		l = ll
		srv.ConnState = ll.chainConnState(srv.ConnState)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }() // joined below

	var err error
	served := false
	select {
	case err = <-serveErr: // the listener failed; still drain and close
		served = true
	case <-ctx.Done():
	case <-stop.Done():
	}
	a.drain(srv, stop, running)
	if !served {
		if e := <-serveErr; !errors.Is(e, http.ErrServerClosed) {
			err = e
		}
	}
	return errors.Join(err, a.Close(context.WithoutCancel(ctx)))
}

// server builds the http.Server that Serve runs, from the App's options.
func (a *App) server(running *inflight) *http.Server {
	write := orDefault(a.WriteTimeout, defaultWriteTimeout)
	srv := &http.Server{
		Handler:           a.handler(running, write),
		ReadHeaderTimeout: orDefault(a.ReadHeaderTimeout, defaultReadHeaderTimeout),
		WriteTimeout:      write, // negative: none, as net/http reads it
		IdleTimeout:       orDefault(a.IdleTimeout, defaultIdleTimeout),
		ReadTimeout:       orDefault(a.ReadTimeout, defaultReadTimeout), // negative: none
		MaxHeaderBytes:    orDefault(a.MaxHeaderBytes, defaultMaxHeaderBytes),
	}
	if a.ConfigureServer != nil {
		a.ConfigureServer(srv)
	}
	return srv
}

// handler wraps the router: it counts running handlers for a forced stop,
// tells Chain the WriteTimeout, and gives porch's request logs Logger.
func (a *App) handler(running *inflight, write time.Duration) http.Handler {
	next, logger := a.Router, a.Logger
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.add()
		defer running.done()
		if write > 0 {
			r = r.WithContext(context.WithValue(r.Context(), writeTimeoutKey{}, write))
		}
		if logger != nil {
			r = r.WithContext(logctx.With(r.Context(), logger))
		}
		next.ServeHTTP(w, r)
	})
}

// drain runs steps 1 and 2 of a stop (see Serve).
func (a *App) drain(srv *http.Server, stop context.Context, running *inflight) {
	budget := orDefault(a.DrainTimeout, defaultDrainTimeout)
	log := a.logger()
	ctx, cancel := budgeted(stop, budget)
	defer cancel()
	if stop.Err() == nil {
		log.Info("porch: draining", "budget", budget)
	}
	if srv.Shutdown(ctx) == nil {
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		log.Warn("porch: drain timed out; closing connections", "budget", budget, "handlers", running.count())
	} else {
		log.Warn("porch: stopping now; closing connections", "handlers", running.count())
	}
	srv.Close() //nolint:errcheck // the listener's close error was Shutdown's to report
	wait := orDefault(a.CloseTimeout, defaultCloseTimeout)
	wctx, cancel := budgeted(context.Background(), wait)
	defer cancel()
	if running.wait(wctx) != nil {
		log.Error("porch: handlers did not return after their connections closed; running the closers anyway",
			"budget", wait, "handlers", running.count())
	}
}

// inflight counts running handlers, so that a forced stop can wait for them
// to return before the closers pull the pool and store from under them.
type inflight struct {
	mu   sync.Mutex // protects the fields below
	n    int
	idle chan struct{} // closed when n drops to zero
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns once no handler runs, or ctx.Err() when ctx ends first.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	n := f.n
	f.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
