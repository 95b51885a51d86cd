package porch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// slowBodyApp is an App whose POST /upload reads its body to the end; its
// handler reports on started once it runs and closes returned when it
// returns.
func slowBodyApp() (app *porch.App, started, returned chan struct{}) {
	app = pingApp()
	app.ReadTimeout = -1 // only the stop may end the upload
	started, returned = make(chan struct{}), make(chan struct{})
	app.Post("/upload", func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		close(started)
		io.ReadAll(r.Body)
	})
	return app, started, returned
}

// openSlowBody starts an upload that never finishes and returns once its
// handler is running.
func openSlowBody(t *testing.T, addr string, started <-chan struct{}) {
	t.Helper()
	c := dial(t, addr)
	c.send(t, "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\nabc")
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("upload handler did not start")
	}
}

// closerProbe is a closer that records how it was called.
type closerProbe struct {
	ctxErr         error // ctx.Err() when it ran
	handlerRunning bool  // the upload handler had not returned
	ran            bool
}

func (p *closerProbe) register(app *porch.App, returned <-chan struct{}) {
	app.OnShutdown(func(ctx context.Context) error {
		p.ran, p.ctxErr = true, ctx.Err()
		select {
		case <-returned:
		default:
			p.handlerRunning = true
		}
		return nil
	})
}

func (p *closerProbe) check(t *testing.T) {
	t.Helper()
	if !p.ran || p.ctxErr != nil || p.handlerRunning {
		t.Errorf("closer: got ran %v with ctx.Err() %v, handler still running %v; want it run with a live context after the handler returned",
			p.ran, p.ctxErr, p.handlerRunning)
	}
}

// A slow upload outlasts the drain: Serve closes its connection when
// DrainTimeout ends and still runs the closers with a live context (they
// once got the drain's expired one, and the limiter's exact counts were
// never written).
func TestServeDrainEndsAndClosersStillRun(t *testing.T) {
	const drain, closeBudget = 200 * time.Millisecond, 3 * time.Second
	app, started, returned := slowBodyApp()
	app.DrainTimeout, app.CloseTimeout = drain, closeBudget
	var probe closerProbe
	probe.register(app, returned)
	s := serveApp(t, app)
	openSlowBody(t, s.addr, started)

	begin := time.Now()
	s.cancel()
	if err := s.wait(t); err != nil {
		t.Errorf("Serve: got %v, want nil (the closers flushed)", err)
	}
	if took := time.Since(begin); took > drain+closeBudget {
		t.Errorf("Serve returned %s after the stop, want within the drain budget %s (+ %s for handlers to return)", took, drain, closeBudget)
	}
	probe.check(t)
}

// StopNow, during a drain that would last a minute, stops at once; the
// closers still run with their own budget.
func TestServeStopNowCutsDrainShort(t *testing.T) {
	const closeBudget = 3 * time.Second
	app, started, returned := slowBodyApp()
	app.DrainTimeout, app.CloseTimeout = time.Minute, closeBudget
	draining := make(chan struct{})
	app.ConfigureServer = func(srv *http.Server) { srv.RegisterOnShutdown(func() { close(draining) }) }
	var probe closerProbe
	probe.register(app, returned)
	s := serveApp(t, app)
	openSlowBody(t, s.addr, started)

	s.cancel()
	select {
	case <-draining:
	case <-time.After(waitLimit):
		t.Fatal("no drain began")
	}
	begin := time.Now()
	app.StopNow()
	if err := s.wait(t); err != nil {
		t.Errorf("Serve: got %v, want nil", err)
	}
	if took := time.Since(begin); took > closeBudget {
		t.Errorf("Serve returned %s after StopNow, want within %s", took, closeBudget)
	}
	probe.check(t)
}

// Each closer has its own budget: one that runs out is reported by error,
// and the next still runs with a live context.
func TestCloseGivesEachCloserItsOwnBudget(t *testing.T) {
	app := porch.New()
	app.CloseTimeout = 50 * time.Millisecond
	var storeErr error
	storeRan := false
	app.OnShutdown(func(ctx context.Context) error { storeRan, storeErr = true, ctx.Err(); return nil })
	app.OnShutdown(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }) // a limiter that hangs

	err := app.Close(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: got %v, want the hung closer's context.DeadlineExceeded", err)
	}
	if !storeRan || storeErr != nil {
		t.Errorf("closer after a hung one: got ran %v with ctx.Err() %v, want run with a live context", storeRan, storeErr)
	}
}
