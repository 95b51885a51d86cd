package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
	"github.com/writeonce/porch-go/porch/store/internal/slotq"
)

// defaultConns is the size of the application's connection pool (Pool)
// when the DSN sets no pool_max_conns. With defaultKeyConns and the
// committer's 3, one instance opens at most 45 connections, so two fit
// PostgreSQL's default max_connections of 100.
const defaultConns = 10

// defaultKeyConns is Options.KeyConns's default.
const defaultKeyConns = 32

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Options are the committer's, which every driver has: Clock (the
	// wall clock, for headers only: windows and expiry are measured on the
	// database's clock), QueueSize, MaxBatch, PruneRows, CommitDelay,
	// Observer and Logger.
	store.Options
	// KeyConns is how many idempotency keys one process may hold at once,
	// one connection each for the owner's handler's whole run; a
	// reservation beyond it fails with driver.ErrNoKeyConn and its request
	// answers 503. If zero, 32: with the application's pool (10 without
	// pool_max_conns in the DSN) and the committer's 3, one instance opens
	// at most 45 connections, so two fit PostgreSQL's default
	// max_connections of 100. Open refuses a negative one.
	KeyConns int
	// Timeout bounds each wait in the store a request makes:
	//   - each commit: a committer's batch of hits (with its take-backs
	//     and resets), an owner's stored response (Save), Inspect and
	//     Forget. Past it the server is asked to cancel, and the requests
	//     are answered 503 with Retry-After, logged and counted (a batch
	//     in Stats.Failed, a Save as idem's Unavailable), and Health says
	//     why until a commit succeeds again. A commit that comes back
	//     only after the bound is such a failure too, never a success.
	//   - Reserve's wait for a key another owner holds (an owner running
	//     on another instance, or the backend of one whose process died
	//     while its COMMIT waited for a synchronous standby): past it
	//     Reserve fails with store.ErrKeyHeld, which idem answers 409
	//     with Retry-After, in flight; the rest of Reserve, and a Load
	//     after it, have Timeout and cancelGrace (1 s) more, past which
	//     they fail as a late commit does (503).
	// It does not bound an owner's own statements (Exec): they are the
	// handler's, under the request's context.
	//
	// What a commit waits for is the server, a lock, or a synchronous
	// standby (synchronous_standby_names) that does not confirm;
	// PostgreSQL cancels the last by committing on the primary alone, so
	// a 503 may mean "done": a count then errs high, and a stored
	// response is replayed to the retry with the same key. A request
	// waits at most about twice Timeout (the batch before its own, then
	// its own). If zero, 3 s: a commit on a healthy server, its
	// synchronous standby included, takes milliseconds, and a request
	// waits at most about twice this (under 10 s) before it is answered
	// 503. Open refuses a negative one.
	Timeout time.Duration
}

// defaultTimeout is Options.Timeout's default.
const defaultTimeout = 3 * time.Second

// Store is the store for several instances behind one load balancer.
// Counters are counted by the database, one atomic statement per batch of
// hits, on the database's clock; idempotency keys are held across instances
// by a transaction-scoped advisory lock in the owner's own transaction,
// which also carries the owner's writes and its response, so that losing
// the connection rolls back all of it. Create it with [Open]; it is safe
// for concurrent use.
//
// Pass it to rate.New, idem.New or kit; an application calls Close, Health, Stats and Pool. Its
// other methods implement porch/store/driver for those packages and are
// not for calling directly.
type Store struct {
	pool   *pgxpool.Pool // the application's queries
	keys   *pgxpool.Pool // one connection per held idempotency key
	slots  chan struct{} // admits at most keys' size reservations, failing fast beyond
	writer *pgxpool.Pool // the committer's own connections
	opt    Options
	c      *commit.Committer
	prunes *pruner // paces the committer's batches' prunes
	saves  *pruner // paces the owners' Saves' prunes
	// durable is Health's probe at the server's level under
	// SurvivesProcessCrash (see Health).
	durable *durableProbe

	claims     policy.Claims // the rate policies this process counts under
	policyMu   sync.Mutex    // serializes policy claims; protects policyConn
	policyConn *pgxpool.Conn // from writer, holding the claims' locks; nil until the first

	slotq *slotq.Queue[slotOp] // slot calls waiting for a pipeline (see newSlotQueue)
}

var (
	_ driver.Store          = (*Store)(nil)
	_ driver.SharedCounters = (*Store)(nil)
)

// Open connects to dsn, migrates the schema and starts the committer.
// opt.Clock supplies only the wall clock for response
// headers: windows and expiry are measured on the database's clock, so
// instances with skewed clocks agree.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	opt.Options = commit.WithDefaults(opt.Options)
	if err := commit.CheckDurability("postgres", opt.Durability); err != nil {
		return nil, err
	}
	switch {
	case opt.KeyConns == 0:
		opt.KeyConns = defaultKeyConns
	case opt.KeyConns < 0:
		return nil, fmt.Errorf("postgres: Options.KeyConns must not be negative, got %d", opt.KeyConns)
	}
	switch {
	case opt.Timeout == 0:
		opt.Timeout = defaultTimeout
	case opt.Timeout < 0:
		return nil, fmt.Errorf("postgres: Options.Timeout must not be negative, got %s", opt.Timeout)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: dsn: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultConns
	}
	// Three pools, so that no use can starve another: owners hold key
	// connections for their handlers' whole run, the handlers query through
	// the application's pool, and counting has connections of its own:
	// the committer's, the policy claims' and Health's probe's.
	pools := make([]*pgxpool.Pool, 0, 3)
	closeAll := func() {
		for _, pl := range pools {
			pl.Close()
		}
	}
	for i, size := range []int32{cfg.MaxConns, int32(opt.KeyConns), 3} {
		c := cfg.Copy()
		c.MaxConns = size
		c.MinConns = min(c.MinConns, size)
		if i == 2 {
			cancelOnServer(c.ConnConfig)
		}
		pl, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("postgres: connect: %w", err)
		}
		pools = append(pools, pl)
	}
	p := &Store{pool: pools[0], keys: pools[1], writer: pools[2], opt: opt,
		prunes: newPruner(opt.PruneRows), saves: newPruner(opt.PruneRows),
		slots: make(chan struct{}, opt.KeyConns)}
	p.durable = &durableProbe{p: p}
	p.slotq = p.newSlotQueue()
	if err := p.migrate(ctx); err != nil {
		closeAll()
		return nil, err
	}
	p.c = commit.New(p.writeBatch, opt.Clock, opt.QueueSize, opt.MaxBatch, opt.Observer)
	return p, nil
}

// readCommitted is every porch transaction's isolation, whatever the
// server's or the DSN's default_transaction_isolation says: a statement
// after a lock wait must see what the lock's previous holder committed,
// which a snapshot taken before the wait (REPEATABLE READ, SERIALIZABLE)
// does not.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// Pool is the application's connection pool (pool_max_conns in the DSN, or
// 10), for its own tables; porch holds keys and counts on pools of its
// own. Porch's tables must not be written through it.
func (p *Store) Pool() *pgxpool.Pool { return p.pool }

// Wall reads the wall clock.
func (p *Store) Wall() time.Time { return p.opt.Clock.Wall() }

// AddHit queues one hit of weight n for key, counted if it fits rule's
// Room, with lease's hold and settlement if it is not the zero Lease (see
// driver.SharedCounters.AddHit); done runs once the batch carrying it has
// committed.
func (p *Store) AddHit(key string, rule driver.Rule, n int64, lease driver.Lease, done func(driver.Hit, error)) error {
	if err := supported(rule); err != nil {
		return err
	}
	h := &commit.Hit{Key: key, Rule: rule, N: n, Held: lease.Held, Settled: lease.Settled, Adopted: lease.Adopted, Done: done}
	if lease.Settled > 0 || lease.Adopted > 0 {
		h.LeaseStart = lease.Start.UnixMilli()
	}
	return p.c.Enqueue(commit.Op{Hit: h})
}

// PeekHit queues a read of key's counter; done runs once the batch
// carrying it has committed, with the state it read.
func (p *Store) PeekHit(key string, rule driver.Rule, done func(driver.Hit, error)) error {
	if err := supported(rule); err != nil {
		return err
	}
	return p.c.Enqueue(commit.Op{Peek: &commit.Hit{Key: key, Rule: rule, Done: done}})
}

// supported fails for a rule whose algorithm this driver has no
// statements for.
func supported(rule driver.Rule) error { return supportedAlgorithm(rule.Algorithm()) }

// supportedAlgorithm fails for an algorithm this driver has no statements
// for; "" is a policy stored before there were others, "fixed".
func supportedAlgorithm(name string) error {
	if _, ok := addStatements[name]; ok || name == "" {
		return nil
	}
	return fmt.Errorf("postgres: %w: %q", driver.ErrAlgorithm, name)
}

// ResetHit queues the clearing of key's counter; done runs once it has
// committed.
func (p *Store) ResetHit(key string, done func(error)) error {
	return p.c.Enqueue(commit.Op{Reset: &commit.Reset{Key: key}, Done: done})
}

// TakeBack queues the removal of n hits from key's window that opened at
// windowStart; done runs once it has committed (see
// driver.SharedCounters.TakeBack).
func (p *Store) TakeBack(key string, windowStart time.Time, n int64, done func(error)) error {
	return p.c.Enqueue(commit.Op{TakeBack: &commit.TakeBack{Key: key, WindowStart: windowStart.UnixMilli(), N: n}, Done: done})
}

// GiveBack queues the end of a lease's hold on key's hits; done runs once
// it has committed (see driver.SharedCounters.GiveBack).
func (p *Store) GiveBack(key string, lease driver.Lease, done func(error)) error {
	tb := &commit.TakeBack{Key: key, WindowStart: lease.Start.UnixMilli(), N: lease.Held, Lease: true, Settled: lease.Settled}
	return p.c.Enqueue(commit.Op{TakeBack: tb, Done: done})
}

// Stats reports the committer's counters.
func (p *Store) Stats() store.Stats { return p.c.Stats() }

// Close commits every queued hit, then closes the pools. If ctx ends first it
// returns ctx.Err() and leaves the flush running.
func (p *Store) Close(ctx context.Context) error {
	if err := p.c.Close(ctx); err != nil {
		return err
	}
	// pgxpool.Close waits for every acquired connection, and an owner holds
	// a key connection for its handler's whole run: wait under ctx, and
	// leave the pools closing in the background if it ends first.
	closed := make(chan struct{})
	go func() {
		p.closePolicies()
		p.pool.Close()
		p.keys.Close()
		p.writer.Close()
		close(closed)
	}()
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("postgres: close: connections still held by owners: %w", ctx.Err())
	}
}
