package porch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// Defaults for the App's options, each stated on its field. Each bounds
// what one client can hold: a server without them keeps an idle or a
// trickling connection forever, and enough of them exhaust the process's
// file descriptors for every client.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultWriteTimeout      = 30 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
	defaultMaxConns          = 4096
	defaultDrainTimeout      = 15 * time.Second
	defaultCloseTimeout      = 5 * time.Second
)

// App is a chi router that knows how to serve and how to stop. [App.Serve]
// bounds what each connection may hold (the timeouts and caps below), and on
// shutdown stops accepting, drains in-flight requests for at most
// DrainTimeout, closes whatever connections are left, then runs the closers
// registered with [App.OnShutdown] (the limiter, the pool, then the store, so
// that the last writes are flushed) in reverse order of registration, each
// with its own CloseTimeout. A closer therefore always gets a live context,
// however the drain went.
//
// New installs three routing behaviours: HEAD is served wherever GET is
// (chi's middleware.GetHead), and a path with no route or a method the path
// does not serve is answered with problem+json (404, and 405 with an Allow
// header). Every chi method works on App as on chi.Router.
//
// Create it with [New]; its option fields may be left zero. A duration or
// count of zero means the default; a negative one means no limit, as in
// net/http. Set the options before Serve; they are read once, when it
// starts. StopNow and Close are safe to call from any goroutine.
type App struct {
	chi.Router

	// ReadHeaderTimeout bounds reading a request's header. If zero, 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, header and body
	// (http.Server.ReadTimeout); a handler still reading the body then gets
	// an error matching os.ErrDeadlineExceeded, which [BodyProblem] answers
	// 408. It does not bound the
	// handler: net/http lifts the deadline once the body has been read. If
	// zero, 30 s, in which an idempotent body of idem's default MaxBody
	// (1 MiB) arrives at 35 KB/s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response (http.Server.WriteTimeout). A
	// response buffered by [Chain] gets it afresh when porch starts writing
	// it, so a slow handler does not eat into it and only the client's
	// reading counts. If zero, 30 s.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request; clients reopen a closed idle connection on their own.
	// If zero, 60 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header (http.Server.MaxHeaderBytes);
	// a larger one gets 431. If zero, 64 KiB: room for large cookies and
	// tokens, far below net/http's 1 MiB; if negative, net/http's own cap,
	// 1 MiB (it has no "none").
	MaxHeaderBytes int
	// MaxConns caps the connections open at once. When every one is taken
	// and a client is waiting to be accepted, the connection that has been
	// idle longest between keep-alive requests is closed to make room, as
	// IdleTimeout would have closed it (clients reopen one on their own), so
	// that nobody can hold the slots by keeping connections open and idle.
	// A connection whose request is being handled is never closed: while
	// every one is busy, a new connection waits in the kernel's accept
	// queue until one finishes or closes. Neither is a connection still
	// sending its first request's header or its TLS handshake (bounded by
	// ReadHeaderTimeout), nor an HTTP/2 connection, whose idleness net/http
	// does not report. Porch holds at most one descriptor beyond the cap.
	// Keep it below the process's open-file limit (ulimit -n) less what the
	// store needs. If zero, 4096: well below the open-file limits Linux
	// hosts and containers commonly set (20,000 and up), leaving room for
	// the store's files and connections; if negative, no cap.
	MaxConns int
	// DrainTimeout bounds how long a stop waits for in-flight requests
	// before it closes their connections. If zero, 15 s: with the default
	// CloseTimeout for each closer it keeps a typical stop (three closers
	// that take their time) inside the 30 s a container orchestrator
	// usually grants before SIGKILL.
	DrainTimeout time.Duration
	// CloseTimeout bounds each closer registered with OnShutdown, and the
	// wait for handlers to return once their connections were closed. If
	// zero, 5 s.
	CloseTimeout time.Duration
	// ConfigureServer, if set, is called with the http.Server that Serve
	// built, after porch has set its fields and before it serves: set
	// TLSConfig, ErrorLog, ConnState, BaseContext or Protocols there, or
	// override one of porch's. Replacing Handler drops the wait for
	// handlers after a forced close and the WriteTimeout of buffered
	// responses.
	ConfigureServer func(*http.Server)
	// Logger receives what the App logs (a drain, a closer that timed
	// out) and, for the requests it serves, what porch logs about them (a
	// handler's panic, a failing store), unless a middleware was given a
	// logger of its own. A line about a request that chi's
	// middleware.RequestID saw carries its "request_id". If nil,
	// slog.Default() as of each line.
	Logger *slog.Logger

	mu      sync.Mutex // protects the fields below
	closers []func(context.Context) error
	stop    context.Context // cancelled by StopNow; made on first use
	stopNow context.CancelFunc
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
// Each runs with its own CloseTimeout; one that fails or times out does not
// keep the others from running.
func (a *App) OnShutdown(f func(ctx context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closers = append(a.closers, f)
}

// StopNow makes Serve stop at once, skipping or cutting short the drain: it
// closes every connection, waits at most CloseTimeout for handlers to
// return, and runs the closers, each with its own CloseTimeout, so that what
// can be flushed still is. A program calls it on a second interrupt. It may
// be called before, during or after Serve, more than once.
func (a *App) StopNow() {
	_, stop := a.stopper()
	stop()
}

// stopper returns the context StopNow cancels, and its cancel.
func (a *App) stopper() (context.Context, context.CancelFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stop == nil {
		a.stop, a.stopNow = context.WithCancel(context.Background())
	}
	return a.stop, a.stopNow
}

// Close runs the closers registered with OnShutdown, in reverse order, once,
// each under a context derived from ctx with CloseTimeout. It returns their
// errors joined, each naming its closer. Serve calls it; call it yourself
// only when Serve never ran.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	closers := a.closers
	a.closers = nil
	a.mu.Unlock()
	budget := orDefault(a.CloseTimeout, defaultCloseTimeout)
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, runCloser(ctx, closers[i], budget, a.logger()))
	}
	return errors.Join(errs...)
}

// runCloser runs f under its own budget and names it in its error and in the
// log, so that a stop that ran out of time says which step did.
func runCloser(ctx context.Context, f func(context.Context) error, budget time.Duration, log *slog.Logger) error {
	ctx, cancel := budgeted(ctx, budget)
	defer cancel()
	err := f(ctx)
	if err == nil {
		return nil
	}
	name := funcName(f)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		log.Error("porch: closer timed out", "closer", name, "budget", budget)
	}
	return fmt.Errorf("porch: close %s: %w", name, err)
}

// logger is Logger, or slog.Default() as of this call.
func (a *App) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// budgeted is context.WithTimeout where a negative budget means none.
func budgeted(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// funcName names f for a log line: "rate.(*Limiter).Close" for a method
// value, the function's name otherwise.
func funcName(f any) string {
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	if fn == nil {
		return "closer"
	}
	name := strings.TrimSuffix(fn.Name(), "-fm")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// orDefault returns v, or def when v is zero.
func orDefault[T time.Duration | int](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
