// Command pgonly shows that a PostgreSQL-only program needs no C compiler.
// It imports porch, porch/rate, porch/idem and porch/store/postgres, never
// porch/store/sqlite (cgo), so it builds with CGO_ENABLED=0; CI builds it
// that way and runs it against its PostgreSQL.
//
// It serves a rate-limited, idempotent POST /orders on a loopback port in a
// schema of its own, sends it four requests (an order, its retry, a second
// order, one over the limit), checks each answer, then stops the way a
// server does: drain, then flush the limiter, the pool and the store. It
// exits 0 only if every answer was right and the flush succeeded, and
// drops its schema either way.
//
// Its server is -dsn, else $PORCH_TEST_POSTGRES, else the local server the
// tests also try (pgschema.LocalDSN):
//
//	CGO_ENABLED=0 go build -o pgonly ./internal/tools/pgonly
//	./pgonly -dsn "$PORCH_TEST_POSTGRES"
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/internal/pgschema"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

func main() {
	dsn := flag.String("dsn", defaultDSN(os.Getenv), "PostgreSQL DSN (default $PORCH_TEST_POSTGRES, else the local server the tests try)")
	flag.Parse()
	fmt.Printf("pgonly: built with CGO_ENABLED=%s\n", buildSetting("CGO_ENABLED"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *dsn, os.Stdout); err != nil {
		if *dsn == pgschema.LocalDSN {
			err = fmt.Errorf("%w (the local server: pass -dsn or set PORCH_TEST_POSTGRES for another)", err)
		}
		fmt.Fprintln(os.Stderr, "pgonly:", err)
		os.Exit(1)
	}
}

// defaultDSN is $PORCH_TEST_POSTGRES, else the local server pgtest tries,
// so that pgonly runs wherever go test ./... finds a PostgreSQL.
func defaultDSN(getenv func(string) string) string {
	if dsn := getenv("PORCH_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return pgschema.LocalDSN
}

// run serves the app in a fresh schema of dsn's database, checks its
// answers and stops it, reporting to out.
func run(ctx context.Context, dsn string, out io.Writer) (err error) {
	dsn, drop, err := pgschema.Fresh(ctx, dsn, "porch_pgonly_")
	if err != nil {
		return err
	}
	defer func() {
		if derr := drop(context.WithoutCancel(ctx)); err == nil {
			err = derr
		}
	}()
	app, orders, err := newApp(ctx, dsn)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		app.Close(context.WithoutCancel(ctx))
		return err
	}
	fmt.Fprintf(out, "pgonly: listening on %s\n", l.Addr())
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- app.Serve(serveCtx, l) }() // joined below
	checkErr := check(ctx, "http://"+l.Addr().String(), out)
	stop()
	if err := <-served; err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if checkErr != nil {
		return checkErr
	}
	if n := orders.Load(); n != 2 {
		return fmt.Errorf("the handler ran %d times, want 2 (two keys; the retry is a replay)", n)
	}
	fmt.Fprintln(out, "pgonly: stopped; state flushed")
	return nil
}

// newApp opens the PostgreSQL store and builds the app: POST /orders behind
// a limiter of 3 requests a minute and idempotency keys. orders counts the
// handler's runs.
func newApp(ctx context.Context, dsn string) (app *porch.App, orders *atomic.Int64, err error) {
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		return nil, nil, err
	}
	app = porch.New()
	app.OnShutdown(st.Close)
	pool := porch.NewPool(porch.PoolOptions{})
	app.OnShutdown(pool.Close)
	lim, err := rate.New(pool, st, 3, time.Minute, rate.Options{})
	if err != nil {
		app.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	app.OnShutdown(lim.Close)
	keys := idem.New(pool, st, idem.Options{RequireKey: true})
	orders = new(atomic.Int64)
	app.With(porch.Chain(lim, keys)).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	})
	return app, orders, nil
}

// check sends the four requests and compares each answer with what the
// limiter and the idempotency keys must give.
func check(ctx context.Context, base string, out io.Writer) error {
	tests := []struct {
		name, key    string
		status       int
		body         string
		wantReplayed bool
	}{
		{"an order", "k1", http.StatusCreated, "order 1", false},
		{"its retry, replayed", "k1", http.StatusCreated, "order 1", true},
		{"a second order", "k2", http.StatusCreated, "order 2", false},
		{"one over the limit", "k3", http.StatusTooManyRequests, "", false},
	}
	for _, tt := range tests {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", tt.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", tt.name, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", tt.name, err)
		}
		replayed := res.Header.Get("Idempotency-Replayed") == "true"
		fmt.Fprintf(out, "pgonly: %s: %d %q replayed=%v\n", tt.name, res.StatusCode, body, replayed)
		if res.StatusCode != tt.status || replayed != tt.wantReplayed || (tt.body != "" && string(body) != tt.body) {
			return fmt.Errorf("%s: got %d %q replayed=%v, want %d %q replayed=%v",
				tt.name, res.StatusCode, body, replayed, tt.status, tt.body, tt.wantReplayed)
		}
	}
	return nil
}

// buildSetting reads one of the settings the binary was built with.
func buildSetting(key string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == key {
				return s.Value
			}
		}
	}
	return "unknown"
}
