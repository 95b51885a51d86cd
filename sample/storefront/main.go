// Command storefront is a small shop on porch: a product list and a checkout
// that writes one order row, behind porch's durable rate limiter. It is the
// sample the acceptance gate drives; its flags and routes are a contract.
//
//	go run ./sample/storefront -addr 127.0.0.1:8080 -db storefront.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// errFlagSyntax marks an error the flag package has already printed.
var errFlagSyntax = errors.New("bad flag")

// config is the storefront's command line.
type config struct {
	addr           string
	db             string
	postgres       string
	rateLimit      int
	rateWindow     time.Duration
	trustProxy     bool
	rateWriteAhead int
	noRateLimit    bool
	keyConns       int
	pool           int
	mailbox        int
	idemTTL        time.Duration
	checkoutDelay  time.Duration
	storeDelay     time.Duration
	wallOffset     time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("storefront", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.StringVar(&c.db, "db", "storefront.db", "SQLite database file (ignored with -postgres)")
	fs.StringVar(&c.postgres, "postgres", "", "PostgreSQL DSN: share counters, idempotency keys and orders with other instances")
	fs.IntVar(&c.rateLimit, "rate-limit", 100, "requests allowed per client per window")
	fs.DurationVar(&c.rateWindow, "rate-window", time.Minute, "rate-limit window")
	fs.IntVar(&c.rateWriteAhead, "rate-write-ahead", 0, "how far a stored count may run ahead of the true one (0: rate.DefaultWriteAhead; negative: write every hit exactly)")
	fs.IntVar(&c.keyConns, "key-conns", 0, "with -postgres: idempotency keys held at once, one connection each (0: store.DefaultPostgresKeyConns)")
	fs.BoolVar(&c.noRateLimit, "no-rate-limit", false, "serve without the rate limiter: a baseline for load runs only")
	fs.BoolVar(&c.trustProxy, "trust-proxy", false, "key clients on X-Forwarded-For as set by one trusted proxy hop")
	fs.IntVar(&c.pool, "pool", 0, "actor pool size (0: porch.DefaultPoolSize)")
	fs.IntVar(&c.mailbox, "mailbox", 0, "mailbox size per actor (0: porch.DefaultMailbox)")
	fs.DurationVar(&c.idemTTL, "idem-ttl", 24*time.Hour, "how long stored idempotent responses are kept")
	fs.DurationVar(&c.checkoutDelay, "checkout-delay", 0, "time the checkout handler works before it writes")
	fs.DurationVar(&c.storeDelay, "store-delay", 0, "fault injection: every store commit takes at least this long")
	fs.DurationVar(&c.wallOffset, "wall-offset", 0, "added to the wall clock this process reads (simulates a clock jump)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %w", errFlagSyntax, err)
	}
	switch {
	case c.rateLimit < 1:
		return c, fmt.Errorf("-rate-limit must be at least 1, got %d", c.rateLimit)
	case c.rateWindow < time.Millisecond:
		return c, fmt.Errorf("-rate-window must be at least 1ms, got %s", c.rateWindow)
	case c.pool < 0 || c.mailbox < 0 || c.keyConns < 0:
		return c, fmt.Errorf("-pool, -mailbox and -key-conns must not be negative")
	case c.idemTTL <= 0:
		return c, fmt.Errorf("-idem-ttl must be positive, got %s", c.idemTTL)
	case c.checkoutDelay < 0 || c.storeDelay < 0:
		return c, fmt.Errorf("-checkout-delay and -store-delay must not be negative")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errFlagSyntax) {
			fmt.Fprintln(os.Stderr, "storefront:", err) // flag prints only its own errors
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		slog.Error("storefront", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	app, err := newShop(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		app.Close(context.Background())
		return err
	}
	// The gate reads this line to learn the port when -addr ends in :0.
	fmt.Printf("storefront: listening on %s\n", l.Addr())
	return app.Serve(ctx, l)
}
