package porch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// DefaultShutdownTimeout bounds how long [App.Serve] waits for in-flight
// requests and closers once asked to stop.
const DefaultShutdownTimeout = 30 * time.Second

// App is a chi router that knows how to stop: on shutdown it stops accepting,
// lets in-flight requests finish, then runs the closers registered with
// [App.OnShutdown] (the pool, then the store, so that the last writes are
// flushed) in reverse order of registration.
//
// New installs three routing behaviours: HEAD is served wherever GET is
// (chi's middleware.GetHead), and a path with no route or a method the path
// does not serve is answered with problem+json (404, and 405 with an Allow
// header). Every chi method works on App as on chi.Router. Create it with
// [New].
type App struct {
	chi.Router

	// ShutdownTimeout bounds the graceful stop. If zero,
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	mu      sync.Mutex // protects closers
	closers []func(context.Context) error
}

// New returns an App over a fresh chi router that serves HEAD where GET is
// served and answers unrouted requests with problem+json.
func New() *App {
	r := chi.NewRouter()
	r.Use(middleware.GetHead)
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed)
	return &App{Router: r}
}

// OnShutdown registers f to run after the server has drained. Closers run in
// reverse order of registration, so register what you opened first first.
func (a *App) OnShutdown(f func(ctx context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closers = append(a.closers, f)
}

// Serve serves on l until ctx ends, then shuts down gracefully and runs the
// closers. It returns the first error of the server or of a closer.
func (a *App) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: a.Router, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()

	var err error
	served := false
	select {
	case err = <-serveErr: // the listener failed; still close what we opened
		served = true
	case <-ctx.Done():
	}
	timeout := a.ShutdownTimeout
	if timeout == 0 {
		timeout = DefaultShutdownTimeout
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if shutErr := srv.Shutdown(stopCtx); err == nil {
		err = shutErr
	}
	if !served {
		if e := <-serveErr; err == nil && !errors.Is(e, http.ErrServerClosed) {
			err = e
		}
	}
	return errors.Join(err, a.Close(stopCtx))
}

// Close runs the closers registered with OnShutdown, in reverse order, once.
// Serve calls it; call it yourself only when Serve never ran.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	closers := a.closers
	a.closers = nil
	a.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i](ctx))
	}
	return errors.Join(errs...)
}
