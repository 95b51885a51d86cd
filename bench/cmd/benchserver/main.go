// Command benchserver serves a trivial "ok" handler through chi behind one
// of the limiters porch's load harness compares, so that every row of the
// table differs in the limiter alone. It is started by the harness
// (bench/cmd/bench) on 127.0.0.1:0 and prints the address it listens on.
//
//	benchserver -mode porch-sqlite -trust-proxy
//
// Modes:
//
//	none            no limiter: the ceiling
//	httprate        go-chi/httprate, in memory
//	naive           a SQLite limiter that reads, increments and commits once
//	                per request (synchronous=FULL), serialized by a mutex
//	naive-postgres  the limiter a chi user writes by hand on PostgreSQL (see
//	                naivepg.go): one autocommit upsert per request on a pgx
//	                pool of 64, answered after its commit (synchronous_commit
//	                off with -durability process-crash), in a fresh schema
//	floor-sqlite    the durability floor (see floor.go): one writer upserts
//	                each queued key's count in one transaction, commits
//	                (synchronous=FULL; NORMAL with -durability process-crash)
//	                and answers
//	porch-sqlite    porch's rate.Limiter on sqlite.Open, durable
//	porch-postgres  porch's rate.Limiter on postgres.Open, in a fresh
//	                schema dropped at exit
//	porch-idem      porch's idem.Keys (on SQLite) in front of POST
//	porch-redis, porch-redis-aof, ulule-redis, redis-rate: see redis.go
//	inflight-memory, inflight-sqlite, inflight-postgres, inflight-redis:
//	                porch's in-flight limiter on each store (inflight.go)
//
// The porch-sqlite and porch-postgres limiters count by -algorithm (fixed,
// sliding or gcra; rate.Options.Algorithm) with -burst (GCRA only;
// rate.Options.Burst, 0 = the limit).
//
// Every limiter keys on the client IP: the connection's peer, or with
// -trust-proxy the address chi's ClientIPFromXFFTrustedProxies(1) resolved
// from X-Forwarded-For. Limits default to 1e9 per window, so every request is
// allowed and the harness measures the counting path, not refusals.
//
// Outside the limiter it serves GET /debug/stats (the store's commit
// counters and the Go heap, as JSON), POST /debug/free
// (runtime/debug.FreeOSMemory), with -debug-clock POST /debug/advance?by=D
// (moves the limiter's clocks forward by D), and with -pprof net/http/pprof
// under /debug/pprof/.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// config is the command line.
type config struct {
	mode        string
	addr        string
	trustProxy  bool
	limit       int
	window      time.Duration
	db          string
	postgres    string
	pool        int
	mailbox     int
	chain       bool
	pprof       bool
	debugClock  bool
	algorithm   rate.Algorithm
	burst       int
	lease       int
	redis       string
	redisAOF    string
	floorGather time.Duration
	durability  store.Durability
}

const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// A default porch.Pool's size and mailbox (porch.PoolOptions documents
// them), which the committer's queue and the floor's are sized by.
const (
	defaultPool    = 16
	defaultMailbox = 1024
)

func parseFlags(args []string) (config, error) {
	var c config
	var algorithm, durability string
	fs := flag.NewFlagSet("benchserver", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", "none", "limiter: none, httprate, naive, naive-postgres, floor-sqlite, porch-sqlite, porch-postgres or porch-idem")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	fs.BoolVar(&c.trustProxy, "trust-proxy", false, "key clients on X-Forwarded-For as set by one trusted proxy hop")
	fs.IntVar(&c.limit, "limit", 1_000_000_000, "requests allowed per client per window")
	fs.DurationVar(&c.window, "window", time.Hour, "rate-limit window")
	fs.DurationVar(&c.floorGather, "floor-gather", floorGather, "floor-sqlite: the longest a batch waits for company, as porch's SQLite committer (0: commits what is queued at once, the floor before 2026-12-07)")
	fs.StringVar(&c.db, "db", "", "SQLite file for naive and porch modes (if empty, one in a temporary directory removed at exit)")
	fs.StringVar(&c.postgres, "postgres", envOr("PORCH_TEST_POSTGRES", defaultPostgres), "PostgreSQL DSN for porch-postgres and naive-postgres")
	fs.StringVar(&c.redis, "redis", envOr("PORCH_TEST_REDIS", "127.0.0.1:6379"), "Redis host:port for porch-redis, ulule-redis and redis-rate")
	fs.StringVar(&c.redisAOF, "redis-aof", "", "Redis host:port with appendonly yes and appendfsync always, for porch-redis-aof")
	fs.IntVar(&c.pool, "pool", 0, "porch actor pool size (0: 16)")
	fs.IntVar(&c.mailbox, "mailbox", 0, "porch mailbox size per actor (0: 1024)")
	fs.BoolVar(&c.chain, "chain", false, "porch-sqlite/porch-postgres: wire the limiter with porch.Chain instead of Limiter.Handler")
	fs.BoolVar(&c.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/")
	fs.BoolVar(&c.debugClock, "debug-clock", false, "serve POST /debug/advance?by=D, which moves porch's clocks forward")
	fs.StringVar(&algorithm, "algorithm", "fixed", "porch-sqlite/porch-postgres: the limiter's algorithm, fixed, sliding or gcra")
	fs.IntVar(&c.burst, "burst", 0, "with -algorithm gcra: requests allowed at once (0: the limit)")
	fs.IntVar(&c.lease, "lease", 0, "porch-postgres/porch-redis: rate.Options.Lease, the hits of a busy key counted ahead (0: none)")
	fs.StringVar(&durability, "durability", "power-loss", "porch-sqlite/porch-postgres: store.Options.Durability, power-loss or process-crash (floor-sqlite: synchronous=FULL or NORMAL; naive-postgres: synchronous_commit on or off)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch durability {
	case "power-loss":
	case "process-crash":
		c.durability = store.SurvivesProcessCrash
	default:
		return c, fmt.Errorf("-durability must be power-loss or process-crash, got %q", durability)
	}
	alg, err := rate.ParseAlgorithm(algorithm)
	if err != nil {
		return c, err
	}
	c.algorithm = alg
	if c.mailbox == 0 {
		c.mailbox = defaultMailbox // the committer holds a write per queued job
	}
	switch {
	case !validMode(c.mode):
		return c, fmt.Errorf("unknown -mode %q", c.mode)
	case c.limit < 1:
		return c, fmt.Errorf("-limit must be at least 1, got %d", c.limit)
	case c.window < time.Millisecond:
		return c, fmt.Errorf("-window must be at least 1ms, got %s", c.window)
	case c.pool < 0 || c.mailbox < 0:
		return c, fmt.Errorf("-pool and -mailbox must not be negative")
	case c.lease < 0 || (c.lease != 0 && c.algorithm == rate.GCRA):
		return c, fmt.Errorf("-lease must not be negative, nor set with -algorithm gcra")
	case c.lease != 0 && c.mode != "porch-postgres" && c.mode != "porch-redis" && c.mode != "porch-redis-aof":
		// rate.New would panic: SQLite counts in memory already.
		return c, fmt.Errorf("-lease is for -mode porch-postgres, porch-redis or porch-redis-aof, got -mode %s", c.mode)
	case c.burst < 0 || (c.burst != 0 && c.algorithm != rate.GCRA):
		return c, fmt.Errorf("-burst must not be negative, and needs -algorithm gcra")
	case c.algorithm == rate.SlidingWindow && c.window%time.Millisecond != 0:
		return c, fmt.Errorf("-algorithm sliding needs a -window of whole milliseconds, got %s", c.window)
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		slog.Error("benchserver", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.db == "" {
		dir, err := os.MkdirTemp("", "benchserver-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.db = dir + "/bench.db"
	}
	app, err := newServer(ctx, cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		app.Close(context.Background())
		return err
	}
	// The harness reads this line to learn the port.
	fmt.Printf("benchserver: listening on %s\n", l.Addr())
	return app.Serve(ctx, l)
}
