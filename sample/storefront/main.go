// Command storefront is a small shop on porch: a product list and a checkout
// that writes one order row, behind porch's durable rate limiter. It is the
// sample the acceptance gate drives; its flags and routes are a contract.
//
//	go run ./sample/storefront -addr 127.0.0.1:8080 -db storefront.db
//
// The limiter allows -rate-limit requests per client per -rate-window,
// counted by -rate-algorithm: fixed (the default; a window opens at a
// client's first request), sliding (the previous window's count weighted
// by its overlap with the last -rate-window, as go-chi/httprate estimates
// it) or gcra (one request per -rate-window/-rate-limit, with -rate-burst
// at once, 0 meaning -rate-limit). -rate-burst is for gcra only: given
// with another algorithm, even as 0, it is refused, as is an unknown
// algorithm or a negative burst, with one line and exit status 2.
//
//	go run ./sample/storefront -rate-algorithm gcra -rate-limit 600 -rate-window 1m -rate-burst 20
//
// With -redis URL (redis://host:port/db or rediss://…) the limiter counts
// on one Redis server, with -redis-sentinel ADDR,ADDR,… and -redis-master
// NAME on the primary those Sentinels name (followed through a failover),
// with -redis-cluster ADDR,ADDR,… on a Redis Cluster (its seed nodes),
// shared by every instance that names it; idempotency keys and orders stay
// on -db or -postgres, whose transaction holds the order and its stored
// response together. -redis-require-durable refuses to start (exit 1) on a
// server that would forget a count it replied to, and fails requests
// closed (503) after a failover to one (see redis.Options.RequireDurable);
// -redis-replicas N answers a request only once N replicas hold its hit,
// else 503, so that a failover cannot forget it (redis.Options.Replicas):
// from start-up, too, while they are still in their first sync;
// -redis-prefix starts every key. More than one of -redis, -redis-sentinel
// and -redis-cluster, -redis-sentinel without -redis-master or the
// reverse, a negative -redis-replicas, or -redis-require-durable,
// -redis-prefix or -redis-replicas with none of them, is refused with one
// line and exit status 2.
//
//	go run ./sample/storefront -redis redis://127.0.0.1:6379/0 -postgres postgres://…
//	go run ./sample/storefront -redis-sentinel 10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379 -redis-master porch -redis-replicas 1 -postgres postgres://…
//
// With -rate-lease N on a shared store (-postgres or a Redis flag) the
// limiter counts a busy client's hits up to N ahead in the store and
// answers them from memory (rate.Options.Lease): never over
// -rate-limit, given back when the client idles and on SIGTERM, at most N
// over-counted per client by a kill -9, and meanwhile another instance may
// refuse a request the count would have allowed. It applies to the general
// limiter, not to /login's. A negative N, N over rate.MaxLimit, N with
// -rate-algorithm gcra, or N on SQLite alone (no -postgres or Redis flag)
// is refused with one line and exit status 2; -rate-lease 0, the default,
// is every hit decided by the store.
//
//	go run ./sample/storefront -postgres postgres://… -rate-lease 16
//
// With -inflight-limit N at most N requests of one client (keyed as the
// rate limiter keys it, so by X-Forwarded-For with -trust-proxy) are in
// flight at once on every rate-limited route; one more is refused 429
// with Retry-After (porch/inflight). They are counted where the limiter
// counts: in the process on SQLite, across every instance on -postgres or
// a Redis flag, where the slots of an instance killed with SIGKILL are
// free for the others within the in-flight limiter's lease (10 s). The rate
// limiter runs first, so a request it refuses never takes a slot; then
// the in-flight limiter, so a request it refuses never reserves its
// idempotency key. 0, the default, is no limit; a negative N is refused
// with one line and exit status 2. -report-handler-span, for the
// acceptance gate's chaos legs, makes GET /products and POST /checkout
// answer X-Handler-Span: when the handler began and wrote its status.
//
//	go run ./sample/storefront -postgres postgres://… -inflight-limit 4
//
// -max-inflight N sheds load: the instance serves at most N requests at
// once (/healthz aside, which is never counted nor refused), and answers
// the others 503 with Retry-After. -critical-reserve F keeps a fraction of
// N for the critical routes, POST /checkout and POST /login: once
// N×(1−F) requests are in flight, the other routes get 503 and the
// critical ones the rest (see porch/shed for the exact thresholds). The
// shedder runs before the rate limiters and idempotency keys, so a shed
// request costs no store work. A negative N, F outside [0, 1), or
// -critical-reserve without -max-inflight, is refused with one line and
// exit status 2; -max-inflight 0, the default, sheds nothing.
//
//	go run ./sample/storefront -max-inflight 256 -critical-reserve 0.25
//
// -durability says what a rate-limit count survives once its verdict is
// answered (store.Options.Durability): power-loss, the default, waits until
// it is on disk; process-crash until the operating system (SQLite) or the
// database server (PostgreSQL, Redis) has it, which a kill -9 of the
// storefront cannot undo but a power loss can, for the last moments of
// counts. Orders and stored responses always wait for the disk. Anything
// else, or process-crash with -redis-require-durable, is refused with one
// line and exit status 2.
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
	"sync"
	"syscall"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
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
	rateAlgorithm  rate.Algorithm
	rateBurst      int
	rateLease      int           // rate.Options.Lease of the general limiter (see shop.go)
	inflightLimit  int           // requests of one client in flight at once (inflight.go); 0: no limit
	reportSpan     bool          // -report-handler-span: the gate's chaos legs read X-Handler-Span
	loginLimit     int           // POST /login: failed attempts per user and address (login.go)
	loginWindow    time.Duration // … per this window
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
	metricsAddr    string
	shed           shedConfig // shed.go
	redis          redisConfig
	durability     store.Durability // store.Options.Durability of every store
	serve          serveConfig
}

// serveConfig is how the storefront serves and stops: porch.App's options,
// where zero means porch's default and a negative duration means none.
type serveConfig struct {
	readTimeout    time.Duration
	writeTimeout   time.Duration
	idleTimeout    time.Duration
	maxHeaderBytes int
	maxConns       int
	drainTimeout   time.Duration
	closeTimeout   time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	var algorithm, cluster, sentinel, durability, reserve string
	fs := flag.NewFlagSet("storefront", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.StringVar(&c.db, "db", "storefront.db", "SQLite database file (ignored with -postgres)")
	fs.StringVar(&c.postgres, "postgres", "", "PostgreSQL DSN: share counters, idempotency keys and orders with other instances")
	fs.IntVar(&c.rateLimit, "rate-limit", 100, "requests allowed per client per window")
	fs.DurationVar(&c.rateWindow, "rate-window", time.Minute, "rate-limit window")
	// A string, checked after Parse: a flag.Value's error would be printed
	// with the whole usage, and a start-up error is one line.
	fs.StringVar(&algorithm, "rate-algorithm", "fixed", "how requests are counted against -rate-limit per -rate-window: fixed, sliding or gcra")
	fs.IntVar(&c.rateBurst, "rate-burst", 0, "with -rate-algorithm gcra: requests allowed at once on top of the steady rate (0: -rate-limit)")
	fs.IntVar(&c.rateLease, "rate-lease", 0, "with -postgres, -redis, -redis-sentinel or -redis-cluster, and -rate-algorithm fixed or sliding: hits a busy client's store trip may count ahead, answered later from memory (0: every hit is decided by the store); see rate.Options.Lease")
	fs.IntVar(&c.inflightLimit, "inflight-limit", 0, "requests of one client in flight at once on every rate-limited route, counted across every instance sharing the limiter's store (-postgres or a Redis flag); 0: no limit")
	fs.BoolVar(&c.reportSpan, "report-handler-span", false, "for the acceptance gate: GET /products and POST /checkout answer X-Handler-Span: when the handler began and wrote its status, in Unix ns")
	fs.IntVar(&c.loginLimit, "login-limit", 5, "POST /login: failed attempts allowed per user and client address per -login-window (successes are not counted)")
	fs.DurationVar(&c.loginWindow, "login-window", 15*time.Minute, "POST /login: the failed-attempts window (a fixed window)")
	fs.IntVar(&c.rateWriteAhead, "rate-write-ahead", 0, "on SQLite (without -postgres or a Redis flag): how far a stored count may run ahead of the true one (0: 256; negative: write every hit exactly); see rate.Options.WriteAhead")
	fs.IntVar(&c.keyConns, "key-conns", 0, "with -postgres: idempotency keys held at once, one connection each (0: 32); see postgres.Options.KeyConns")
	fs.BoolVar(&c.noRateLimit, "no-rate-limit", false, "serve without the rate limiter: a baseline for load runs only")
	fs.BoolVar(&c.trustProxy, "trust-proxy", false, "key clients on X-Forwarded-For as set by one trusted proxy hop")
	fs.IntVar(&c.pool, "pool", 0, "actor pool size (0: 16)")
	fs.IntVar(&c.mailbox, "mailbox", 0, "mailbox size per actor (0: 1024)")
	fs.DurationVar(&c.idemTTL, "idem-ttl", 24*time.Hour, "how long stored idempotent responses are kept")
	fs.DurationVar(&c.checkoutDelay, "checkout-delay", 0, "time the checkout handler works before it writes")
	fs.DurationVar(&c.storeDelay, "store-delay", 0, "fault injection: every store commit takes at least this long")
	fs.DurationVar(&c.wallOffset, "wall-offset", 0, "added to the wall clock this process reads (simulates a clock jump)")
	fs.StringVar(&c.redis.url, "redis", "", "count rate limits on this Redis server (redis://host:port/db or rediss://…); idempotency keys stay on -db or -postgres")
	fs.StringVar(&sentinel, "redis-sentinel", "", "count rate limits on the Redis primary these Sentinels name (host:port,host:port,…), followed through failovers; with -redis-master")
	fs.StringVar(&c.redis.master, "redis-master", "", "with -redis-sentinel: the name the Sentinels monitor the primary under")
	fs.StringVar(&cluster, "redis-cluster", "", "count rate limits on this Redis Cluster: its seed nodes, host:port,host:port,…")
	fs.StringVar(&c.redis.prefix, "redis-prefix", "", "with -redis, -redis-sentinel or -redis-cluster: start every key with this (empty: \"porch:\"); see redis.Options.Prefix")
	fs.BoolVar(&c.redis.requireDurable, "redis-require-durable", false, "with -redis, -redis-sentinel or -redis-cluster: refuse to start, and fail closed after a failover, unless the primary makes a count durable before it replies (appendonly yes, appendfsync always)")
	fs.IntVar(&c.redis.replicas, "redis-replicas", 0, "with -redis, -redis-sentinel or -redis-cluster: replicas that must hold a hit before it is answered, else 503 (Redis WAIT; 0: none, and a failover may forget answered hits); see redis.Options.Replicas")
	fs.StringVar(&durability, "durability", "power-loss", "what a rate-limit count survives before its verdict: power-loss (on disk) or process-crash (with the operating system or the database server: a power loss may lose the last moments of counts); stored responses and orders always wait for the disk")
	fs.IntVar(&c.shed.maxInflight, "max-inflight", 0, "requests this instance serves at once, past which it answers 503 (0: no limit); /healthz is not counted")
	fs.StringVar(&reserve, "critical-reserve", "0", "with -max-inflight: the `fraction` of it, in [0, 1), kept for the critical routes (POST /checkout, POST /login): others get 503 once -max-inflight×(1−F) requests are in flight")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at GET /metrics on this address, apart from -addr (port 0 picks a free port; empty: no metrics); see docs/observability.md")
	fs.DurationVar(&c.serve.readTimeout, "read-timeout", 0, "time to read a whole request, header and body (0: 30s; negative: none)")
	fs.DurationVar(&c.serve.writeTimeout, "write-timeout", 0, "time to write a response (0: 30s; negative: none)")
	fs.DurationVar(&c.serve.idleTimeout, "idle-timeout", 0, "how long a keep-alive connection may wait for its next request (0: 60s; negative: none)")
	fs.IntVar(&c.serve.maxHeaderBytes, "max-header-bytes", 0, "largest request header accepted, else 431 (0: 64 KiB)")
	fs.IntVar(&c.serve.maxConns, "max-conns", 0, "connections open at once; more wait to be accepted (0: 4096; negative: no cap)")
	fs.DurationVar(&c.serve.drainTimeout, "drain-timeout", 0, "on SIGTERM or SIGINT, how long in-flight requests may finish before their connections are closed (0: 15s; negative: no limit); a second signal stops at once")
	fs.DurationVar(&c.serve.closeTimeout, "close-timeout", 0, "on stopping, the budget of each step that flushes state: the limiter, the pool, the store (0: 5s; negative: no limit)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %w", errFlagSyntax, err)
	}
	burstSet, replicasSet, reserveSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		burstSet = burstSet || f.Name == "rate-burst"
		replicasSet = replicasSet || f.Name == "redis-replicas"
		reserveSet = reserveSet || f.Name == "critical-reserve"
	})
	var err error
	if c.shed, err = c.shed.check(reserve, reserveSet); err != nil { // shed.go
		return c, err
	}
	if c.redis, err = c.redis.check(sentinel, cluster, replicasSet); err != nil {
		return c, err
	}
	switch durability {
	case "power-loss":
		c.durability = store.SurvivesPowerLoss
	case "process-crash":
		c.durability = store.SurvivesProcessCrash
	default:
		return c, fmt.Errorf("-durability must be power-loss or process-crash, got %q", durability)
	}
	if c.redis.requireDurable && c.durability == store.SurvivesProcessCrash {
		// redis.Open would refuse the pair; refused here, it is one line
		// and exit status 2, as every contradiction on the command line.
		return c, errors.New("-redis-require-durable asks that a count be on Redis's disk before its reply, -durability process-crash that it need not be: give one")
	}
	if c.rateAlgorithm, err = rate.ParseAlgorithm(algorithm); err != nil {
		return c, fmt.Errorf("-rate-algorithm must be fixed, sliding or gcra, got %q", algorithm)
	}
	switch {
	case c.rateBurst < 0:
		return c, fmt.Errorf("-rate-burst must not be negative, got %d", c.rateBurst)
	case burstSet && c.rateAlgorithm != rate.GCRA:
		// Even -rate-burst 0: a burst asked of an algorithm without one is
		// a mistake in the command line, not a default.
		return c, fmt.Errorf("-rate-burst is for -rate-algorithm gcra only, got -rate-burst %d with %s", c.rateBurst, c.rateAlgorithm)
	}
	// -rate-lease 0 is accepted anywhere: it asks for what every store
	// does without the flag, unlike -rate-burst 0, which asks for a burst.
	switch {
	case c.rateLease < 0:
		return c, fmt.Errorf("-rate-lease must not be negative, got %d", c.rateLease)
	case c.rateLease > rate.MaxLimit:
		return c, fmt.Errorf("-rate-lease must be at most %d, got %d", rate.MaxLimit, c.rateLease)
	case c.rateLease > 0 && c.rateAlgorithm == rate.GCRA:
		// rate.New would panic: a token bucket would see a lease's hits,
		// answered after the store counted them, as a burst.
		return c, fmt.Errorf("-rate-lease is for -rate-algorithm fixed or sliding, got -rate-lease %d with gcra", c.rateLease)
	case c.rateLease > 0 && c.postgres == "" && !c.redis.enabled():
		// SQLite would ignore it: its limiter counts in memory already,
		// -rate-write-ahead ahead of the file.
		return c, fmt.Errorf("-rate-lease needs -postgres, -redis, -redis-sentinel or -redis-cluster: on SQLite the limiter already counts in memory (see -rate-write-ahead)")
	}
	switch {
	case c.inflightLimit < 0:
		return c, fmt.Errorf("-inflight-limit must not be negative, got %d", c.inflightLimit)
	case c.inflightLimit > 0 && c.noRateLimit:
		// The baseline routes mount no limiter: the limit would be
		// accepted and do nothing.
		return c, errors.New("-inflight-limit limits the rate-limited routes, which -no-rate-limit serves without any limiter: give one")
	}
	switch {
	case c.rateLimit < 1:
		return c, fmt.Errorf("-rate-limit must be at least 1, got %d", c.rateLimit)
	case c.rateWindow < time.Millisecond:
		return c, fmt.Errorf("-rate-window must be at least 1ms, got %s", c.rateWindow)
	case c.rateLimit > rate.MaxLimit:
		return c, fmt.Errorf("-rate-limit must be at most %d, got %d", rate.MaxLimit, c.rateLimit)
	case c.rateWindow > rate.MaxWindow:
		return c, fmt.Errorf("-rate-window must be at most %s, got %s", rate.MaxWindow, c.rateWindow)
	case c.rateBurst > rate.MaxLimit:
		return c, fmt.Errorf("-rate-burst must be at most %d, got %d", rate.MaxLimit, c.rateBurst)
	case c.rateAlgorithm == rate.GCRA && gcraTooDeep(c.rateLimit, c.rateWindow, c.rateBurst):
		return c, fmt.Errorf("-rate-burst %d of intervals of -rate-window/-rate-limit spans more than %s", c.rateBurst, rate.MaxWindow)
	case c.loginLimit < 1 || c.loginLimit > rate.MaxLimit:
		return c, fmt.Errorf("-login-limit must be between 1 and %d, got %d", rate.MaxLimit, c.loginLimit)
	case c.loginWindow < time.Millisecond || c.loginWindow > rate.MaxWindow:
		return c, fmt.Errorf("-login-window must be between 1ms and %s, got %s", rate.MaxWindow, c.loginWindow)
	case c.pool < 0 || c.mailbox < 0 || c.keyConns < 0:
		return c, fmt.Errorf("-pool, -mailbox and -key-conns must not be negative")
	case c.idemTTL <= 0:
		return c, fmt.Errorf("-idem-ttl must be positive, got %s", c.idemTTL)
	case c.checkoutDelay < 0 || c.storeDelay < 0:
		return c, fmt.Errorf("-checkout-delay and -store-delay must not be negative")
	case c.serve.maxHeaderBytes < 0:
		return c, fmt.Errorf("-max-header-bytes must not be negative, got %d", c.serve.maxHeaderBytes)
	}
	return c, nil
}

// writeAhead is -rate-write-ahead where the limiters count: on SQLite.
// On PostgreSQL or Redis the store decides every hit itself, and rate.New
// refuses a WriteAhead there; the flag has always been accepted with
// -postgres and -redis, so it is not refused, only not passed on.
func (c config) writeAhead() int {
	if c.postgres != "" || c.redis.enabled() {
		return 0
	}
	return c.rateWriteAhead
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		// -h or -help: the flag package has printed the usage. Asking for
		// it is no mistake, so exit 0, as flag.ExitOnError does.
		os.Exit(0)
	}
	if err != nil {
		if !errors.Is(err, errFlagSyntax) {
			fmt.Fprintln(os.Stderr, "storefront:", err) // flag prints only its own errors
		}
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		slog.Error("storefront", "err", err)
		os.Exit(1)
	}
}

// run serves until SIGTERM or SIGINT, then drains; a second signal stops at
// once. Either way the limiter, the pool and the store are flushed, and a
// nil error (exit status 0) means they were.
func run(cfg config) error {
	// Caught before the store opens, so that a signal during start-up stops
	// the storefront cleanly once it serves, not half-way through opening.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	var obs *prom.Metrics
	if cfg.metricsAddr != "" {
		m, err := startMetrics(cfg.metricsAddr)
		if err != nil {
			return err
		}
		// Closed after the app, so a scrape during the drain still answers.
		defer m.Close(context.Background()) //nolint:errcheck // the process is exiting
		obs = m.metrics
		// The gate reads this line, printed before the listening line.
		fmt.Printf("storefront: metrics on %s\n", m.addr)
	}
	app, err := newShop(cfg, obs)
	if err != nil {
		return err
	}
	cfg.serve.apply(app)
	l, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		app.Close(context.Background())
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	var relay sync.WaitGroup
	relay.Go(func() { relaySignals(sigs, served, cancel, app.StopNow) })
	defer relay.Wait()
	defer close(served)
	// The gate reads this line to learn the port when -addr ends in :0.
	fmt.Printf("storefront: listening on %s\n", l.Addr())
	if err := app.Serve(ctx, l); err != nil {
		return err
	}
	slog.Info("storefront: stopped; state flushed")
	return nil
}

// relaySignals turns the first signal into a drain (cancel) and the second
// into an immediate stop (stopNow), until served is closed. Later signals
// are ignored: the flush they would cut short has its own budget.
func relaySignals(sigs <-chan os.Signal, served <-chan struct{}, cancel, stopNow func()) {
	for n := 1; ; n++ {
		select {
		case sig := <-sigs:
			switch n {
			case 1:
				slog.Info("storefront: stopping; signal again to stop at once", "signal", sig)
				cancel()
			case 2:
				slog.Info("storefront: stopping at once; flushing state", "signal", sig)
				stopNow()
			default:
				slog.Info("storefront: already stopping", "signal", sig)
			}
		case <-served:
			return
		}
	}
}

// apply sets app's serving options from the flags.
func (c serveConfig) apply(app *porch.App) {
	app.ReadTimeout = c.readTimeout
	app.WriteTimeout = c.writeTimeout
	app.IdleTimeout = c.idleTimeout
	app.MaxHeaderBytes = c.maxHeaderBytes
	app.MaxConns = c.maxConns
	app.DrainTimeout = c.drainTimeout
	app.CloseTimeout = c.closeTimeout
}

// gcraTooDeep reports whether a GCRA bucket of burst (0: limit) emission
// intervals of window/limit, rounded up, spans more than rate.MaxWindow,
// which rate.New refuses.
func gcraTooDeep(limit int, window time.Duration, burst int) bool {
	if burst == 0 {
		burst = limit
	}
	interval := (window + time.Duration(limit) - 1) / time.Duration(limit)
	return int64(burst) > int64(rate.MaxWindow/max(interval, 1))
}
