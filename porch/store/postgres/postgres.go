package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/header"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
)

// DefaultConns is the size of the application's connection pool (Pool)
// when the DSN sets no pool_max_conns. With DefaultKeyConns and the
// committer's 3, one instance opens at most 45 connections, so two fit
// PostgreSQL's default max_connections of 100.
const DefaultConns = 10

// DefaultKeyConns is Options.KeyConns's default.
const DefaultKeyConns = 32

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
	// answers 503. If zero, DefaultKeyConns; Open refuses a negative one.
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
	// its own). If zero, DefaultTimeout; Open refuses a negative one.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default: a commit on a healthy
// server, its synchronous standby included, takes milliseconds, and a
// request waits at most about twice this (under 10 s) before it is
// answered 503.
const DefaultTimeout = 3 * time.Second

// Store is the store for several instances behind one load balancer.
// Counters are counted by the database, one atomic statement per batch of
// hits, on the database's clock; idempotency keys are held across instances
// by a transaction-scoped advisory lock in the owner's own transaction,
// which also carries the owner's writes and its response, so that losing
// the connection rolls back all of it. Create it with [Open]; it is safe
// for concurrent use.
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
		opt.KeyConns = DefaultKeyConns
	case opt.KeyConns < 0:
		return nil, fmt.Errorf("postgres: Options.KeyConns must not be negative, got %d", opt.KeyConns)
	}
	switch {
	case opt.Timeout == 0:
		opt.Timeout = DefaultTimeout
	case opt.Timeout < 0:
		return nil, fmt.Errorf("postgres: Options.Timeout must not be negative, got %s", opt.Timeout)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: dsn: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultConns
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

func (p *Store) migrate(ctx context.Context) error {
	return pgx.BeginTxFunc(ctx, p.writer, readCommitted, func(tx pgx.Tx) error {
		// A DSN's statement_timeout or lock_timeout is for the
		// application's queries: an instance starting beside others that
		// migrate must wait its turn for the schema lock (bounded by ctx),
		// not fail to open.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, pgLockSchema); err != nil {
			return fmt.Errorf("postgres: lock schema: %w", err)
		}
		if _, err := tx.Exec(ctx, pgVersionTable); err != nil {
			return fmt.Errorf("postgres: schema version table: %w", err)
		}
		var version int
		if err := tx.QueryRow(ctx, pgReadVersion).Scan(&version); err != nil {
			return fmt.Errorf("postgres: read schema version: %w", err)
		}
		if version > len(postgresMigrations) {
			return fmt.Errorf("postgres: schema version %d is newer than this build knows (%d)", version, len(postgresMigrations))
		}
		if version == len(postgresMigrations) {
			// Nothing written, so the COMMIT waits for no synchronous
			// standby: an instance restarted while one is down opens, and
			// at SurvivesProcessCrash counts (see TestOpenWithNothingToChangeCommitsNothing).
			return nil
		}
		for v := version; v < len(postgresMigrations); v++ {
			if _, err := tx.Exec(ctx, postgresMigrations[v]); err != nil {
				return fmt.Errorf("postgres: migrate to %d: %w", v+1, err)
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(pgWriteVersion, len(postgresMigrations))); err != nil {
			return fmt.Errorf("postgres: write schema version: %w", err)
		}
		return nil
	})
}

// Pool is the application's connection pool (pool_max_conns in the DSN, or
// DefaultConns), for its own tables; porch holds keys and counts on
// pools of its own. Porch's tables must not be written through it.
func (p *Store) Pool() *pgxpool.Pool { return p.pool }

// Wall reads the wall clock.
func (p *Store) Wall() time.Time { return p.opt.Clock.Wall() }

// AddHit queues one hit of weight n for key, counted if it fits rule's
// Room; done runs once the batch carrying it has committed.
func (p *Store) AddHit(key string, rule driver.Rule, n int64, done func(driver.Hit, error)) error {
	return p.AddLeased(key, rule, n, driver.Lease{}, done)
}

// AddLeased is AddHit with a lease's hold and settlement (see
// driver.SharedCounters.AddLeased).
func (p *Store) AddLeased(key string, rule driver.Rule, n int64, lease driver.Lease, done func(driver.Hit, error)) error {
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

// Reserve begins the owner's transaction on a connection of its own and
// takes key's transaction-scoped advisory lock in it, waiting under ctx,
// and at most Options.Timeout (then store.ErrKeyHeld), while an owner on
// any instance holds it. The lock, the owner's writes and
// its response live and die with that one transaction: if the connection
// is lost (the process died, the session was terminated, a proxy cut it),
// PostgreSQL rolls all of it back and lets the next owner in on a clean
// slate. No lease and no timeout guess is involved.
func (p *Store) Reserve(ctx context.Context, key string) (driver.Reservation, error) {
	select {
	case p.slots <- struct{}{}:
	default:
		return nil, driver.ErrNoKeyConn
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, p.opt.Timeout+cancelGrace)
	defer cancel()
	conn, err := p.keys.Acquire(ctx) // may connect
	if err != nil {
		<-p.slots
		if caller.Err() != nil {
			return nil, fmt.Errorf("postgres: reserve: %w", err)
		}
		return nil, p.late(ctx, "reserve", fmt.Errorf("postgres: reserve: %w", err))
	}
	r := &reservation{p: p, conn: conn, key: key}
	tx, err := lockKey(ctx, conn.Conn(), dbKey(key), p.opt.Timeout, r.scanLoad)
	if err != nil {
		// A lock granted just as ctx ended must not stay on a pooled
		// connection: close it, which ends the transaction and its lock.
		discard(conn)
		<-p.slots
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == pgLockNotAvailable:
			return nil, fmt.Errorf("postgres: reserve: %w: not free within %s", store.ErrKeyHeld, p.opt.Timeout)
		case caller.Err() != nil:
			return nil, fmt.Errorf("postgres: reserve: %w", err)
		}
		return nil, p.late(ctx, "reserve", fmt.Errorf("postgres: reserve: %w", err))
	}
	r.tx = tx
	return r, nil
}

// pgLockNotAvailable is the SQLSTATE of a lock wait that outlasted
// lock_timeout.
const pgLockNotAvailable = "55P03"

// Inspect reads key's stored response in a transaction that takes key's
// lock without waiting: store.ErrKeyHeld while an owner on any instance
// holds it.
func (p *Store) Inspect(ctx context.Context, key string) (res driver.Response, ok bool, err error) {
	err = p.freeKeyTx(ctx, key, func(tx pgx.Tx) error {
		var created, expires int64
		var headers []byte
		err := tx.QueryRow(ctx, pgLoadResponse, dbKey(key)).
			Scan(&res.Digest, &res.Status, &res.ContentType, &res.Body, &created, &expires, &headers)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Key, ok = key, true
		res.Created, res.Expires = time.UnixMilli(created), time.UnixMilli(expires)
		res.Header = header.Decode(headers)
		return nil
	})
	if err != nil {
		return driver.Response{}, false, fmt.Errorf("postgres: inspect: %w", err)
	}
	return res, ok, nil
}

// Forget deletes key's stored response in a transaction that takes key's
// lock without waiting, and returns once it has committed: store.ErrKeyHeld
// while an owner on any instance holds the key.
func (p *Store) Forget(ctx context.Context, key string) error {
	err := p.freeKeyTx(ctx, key, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pgForgetResponse, dbKey(key))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: forget: %w", err)
	}
	return nil
}

// freeKeyTx runs fn in a transaction on a key connection that holds key's
// lock, taken without waiting, and commits it, within Options.Timeout;
// store.ErrKeyHeld if an owner holds the lock. A support tool's call fails
// fast like an owner's (driver.ErrNoKeyConn) rather than queue behind the
// owners.
func (p *Store) freeKeyTx(ctx context.Context, key string, fn func(pgx.Tx) error) error {
	select {
	case p.slots <- struct{}{}:
	default:
		return driver.ErrNoKeyConn
	}
	defer func() { <-p.slots }()
	caller := ctx
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	late := func(err error) error {
		if caller.Err() != nil {
			return err // the caller's own end, not the store's failure
		}
		return p.late(ctx, "key", err)
	}
	conn, err := p.keys.Acquire(ctx)
	if err != nil {
		return late(err)
	}
	defer conn.Release() // pgxpool closes a connection left in a transaction
	err = pgx.BeginTxFunc(ctx, conn, readCommitted, func(tx pgx.Tx) error {
		var free bool
		if err := tx.QueryRow(ctx, pgTryLockKey, dbKey(key)).Scan(&free); err != nil {
			return err
		}
		if !free {
			return store.ErrKeyHeld
		}
		return fn(tx)
	})
	cancelAbandoned(ctx, conn)
	return late(err)
}

// lockKey begins the owner's transaction on conn, takes key's lock in it
// and reads key's stored response (pgLoadResponse, handed to load), BEGIN,
// the lock and the read pipelined in one round trip: the lock is still
// taken inside the transaction, which the server has begun before it runs
// the lock statement, and the read runs once the lock is granted, as the
// owner's first Load would.
//
// The lock and the read wait at most wait for a lock (lock_timeout, set
// for them alone, then reset to the session's value for the owner's own
// statements): past it the server gives up with pgLockNotAvailable. The
// key's holder may be an owner still running on another instance, or the
// backend of one whose process died while its COMMIT waited for a dead
// synchronous standby, which nobody will cancel; either way the caller
// hears that the key is held, in time.
func lockKey(ctx context.Context, conn *pgx.Conn, key []byte, wait time.Duration, load func(pgx.Row) error) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(readCommitted)
	b.Queue(pgSetLockTimeout, fmt.Sprintf("%dms", max(wait.Milliseconds(), 1)))
	b.Queue(pgLockKey, key)
	b.Queue(pgLoadResponse, key)
	b.Queue(pgResetLockTimeout)
	br := conn.SendBatch(ctx, b)
	_, err := br.Exec()
	for range 2 { // lock_timeout, the lock
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		err = load(br.QueryRow())
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return br.Tx(), nil
}

// discard closes a connection instead of returning it to the pool. A
// request may be waiting behind it, and Close first writes a goodbye that a
// cut network can hold up, so it gets the same second of grace as a
// cancel request before the socket is simply closed.
func discard(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Hijack().Close(ctx) //nolint:errcheck // it is being thrown away
}

type reservation struct {
	p   *Store
	key string

	mu     sync.Mutex    // serializes use of conn, which is not safe for concurrent use
	conn   *pgxpool.Conn // nil once the reservation has ended
	tx     pgx.Tx
	failed error // the first of the owner's statements that failed; Save returns it

	// loaded is what Reserve read with the lock, for the first Load: the
	// owner's first statement, one round trip fewer. Later Loads read again.
	loaded    bool
	loadedRes driver.Response
	loadedOK  bool
}

// scanLoad reads pgLoadResponse's row into r's loaded response.
func (r *reservation) scanLoad(row pgx.Row) error {
	res, ok, err := scanResponse(r.key, row)
	if err != nil {
		return err
	}
	r.loaded, r.loadedRes, r.loadedOK = true, res, ok
	return nil
}

func scanResponse(key string, row pgx.Row) (driver.Response, bool, error) {
	res := driver.Response{Key: key}
	var created, expires int64
	var headers []byte
	err := row.Scan(&res.Digest, &res.Status, &res.ContentType, &res.Body, &created, &expires, &headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.Response{}, false, nil
	}
	if err != nil {
		return driver.Response{}, false, fmt.Errorf("postgres: load response: %w", err)
	}
	res.Created, res.Expires = time.UnixMilli(created), time.UnixMilli(expires)
	res.Header = header.Decode(headers)
	return res, true, nil
}

func (r *reservation) Load(ctx context.Context) (driver.Response, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return driver.Response{}, false, driver.ErrReleased
	}
	if r.loaded {
		r.loaded = false
		res, ok := r.loadedRes, r.loadedOK
		r.loadedRes = driver.Response{}
		return res, ok, nil
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, r.p.opt.Timeout+cancelGrace)
	defer cancel()
	res, ok, err := scanResponse(r.key, r.tx.QueryRow(ctx, pgLoadResponse, dbKey(r.key)))
	if err != nil && caller.Err() == nil {
		err = r.p.late(ctx, "load response", err)
	}
	return res, ok, err
}

// Exec runs the statement now, in the owner's transaction: the handler sees
// its error at once and may read its own writes through the same
// transaction's later statements. A failed statement aborts the
// transaction (PostgreSQL's rule), so Save will fail too.
func (r *reservation) Exec(ctx context.Context, query string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return driver.ErrReleased
	}
	if r.failed != nil {
		return r.failed
	}
	if _, err := r.tx.Exec(ctx, query, args...); err != nil {
		if ownersFault(ctx, err) {
			err = fmt.Errorf("%w: %w", store.ErrWriteFailed, err)
		} else {
			err = fmt.Errorf("postgres: owner's write: %w", err)
		}
		r.failed = err
		return err
	}
	if r.conn.Conn().PgConn().TxStatus() != 'T' {
		// The statement ended the owner's transaction (a COMMIT or ROLLBACK
		// in the handler's SQL), and the key's lock with it: what it wrote
		// before is committed or gone on its own, and nothing after it may
		// be reported as committed together with the response.
		r.failed = errTxEnded
		return r.failed
	}
	return nil
}

// errTxEnded is an owner's statement that ended its transaction. It is not
// store.ErrWriteFailed: a COMMIT among the handler's statements has made
// some of its writes durable without the response.
var errTxEnded = errors.New("postgres: owner's write: the statement ended the owner's transaction")

// ownersFault tells a statement the server refused for what it says (a
// constraint, a syntax error, bad data) from a connection or server that
// failed under it, which may pass on a retry.
func ownersFault(ctx context.Context, err error) bool {
	var pe *pgconn.PgError
	if ctx.Err() != nil || !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	if pe.Severity == "FATAL" || pe.Severity == "PANIC" {
		return false // the session ended (a timeout, a terminated backend): not the statement's doing
	}
	switch pe.Code[:2] {
	case "08", "25", "40", "53", "55", "57", "58", "XX":
		// connection, transaction state, rollback, resources, object
		// state (lock_timeout), operator, system, internal
		return false
	}
	return true
}

// Save stores res in the owner's transaction and commits it with the
// owner's writes, then, paced (see pruner), prunes a bounded batch of
// expired responses, so an
// application that uses idempotency without the limiter still keeps its
// table in check. The prune runs after the commit, in a transaction of
// its own that waits for no standby (see queuePruneAfterSave).
func (r *reservation) Save(ctx context.Context, res driver.Response, ttl time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return driver.ErrReleased
	}
	if r.failed != nil {
		r.end(false)
		return r.failed
	}
	if r.conn.Conn().PgConn().TxStatus() != 'T' {
		// Not in the owner's transaction (ended or aborted by a statement
		// that did not go through Exec): a pipelined COMMIT would answer
		// COMMIT, or ROLLBACK, without committing the owner's writes.
		r.end(false)
		return fmt.Errorf("postgres: save response: %w", errTxEnded)
	}
	if res.Body == nil {
		res.Body = []byte{} // NOT NULL: an empty body is a value
	}
	ctx, cancel := r.p.bounded(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(pgSaveResponse, dbKey(r.key), res.Digest, res.Status, res.ContentType, res.Body,
		ttl.Milliseconds(), header.Encode(res.Header))
	b.Queue("COMMIT")
	prune := r.p.saves.claim(time.Now())
	if prune {
		queuePruneAfterSave(b, r.p.opt.PruneRows)
	}
	br := r.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		// The server skipped the rest of the pipeline, COMMIT included.
		br.Close()
		r.endBounded(ctx)
		return r.p.late(ctx, "save response", fmt.Errorf("postgres: save response: %w", err))
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = pgx.ErrTxCommitRollback // COMMIT of an aborted transaction answers ROLLBACK
	}
	if err != nil {
		// A deferred constraint fails here, and is the owner's; if the
		// connection died during COMMIT the outcome is unknown, and the next
		// owner reads the table and learns it.
		br.Close()
		r.endBounded(ctx)
		if ownersFault(ctx, err) {
			return fmt.Errorf("%w: %w", store.ErrWriteFailed, err)
		}
		return r.p.late(ctx, "commit response", fmt.Errorf("postgres: commit response: %w", err))
	}
	if prune {
		if deleted, err := readPruneAfterSave(br); err != nil {
			commit.Log(r.p.opt.Logger).Warn("postgres: prune responses", "err", err) // a later save prunes again
		} else {
			r.p.saves.pruned(deleted)
		}
	}
	br.Close() //nolint:errcheck // committed; the only statement left to fail was the prune, logged
	r.end(true)
	// Committed, but past the bound only if a synchronous standby's
	// confirmation or the disk kept it: its client is told it failed, and
	// its retry replays it.
	return r.p.late(ctx, "commit response", nil)
}

// queuePruneAfterSave queues Save's prune after its COMMIT, in a
// transaction of its own, so that its failure cannot take the stored
// response with it, and at synchronous_commit off, so that its commit
// waits for no synchronous standby and no disk flush: a prune lost in a
// crash only leaves expired rows for the next one. That is what makes it
// safe to pipeline. A Save past its bound has its connection closed and
// one cancel request sent, which the COMMIT uses up; the server then runs
// the prune for a client that has gone. At the server's level its commit
// would wait for a dead standby with nobody left to cancel it, one
// backend and its row locks per such Save; at off it finishes at once
// (its DELETE skips locked rows, so it waits for no lock either). Run
// after the answer instead, it would cost the owner a round trip of its
// own in every Save under a backlog.
func queuePruneAfterSave(b *pgx.Batch, rows int) {
	b.Queue(pgBegin)
	b.Queue(pgCommitAsync)
	b.Queue(pgPruneResponses, rows)
	b.Queue("COMMIT")
}

// readPruneAfterSave reads what queuePruneAfterSave queued and returns
// how many rows the prune deleted.
func readPruneAfterSave(br pgx.BatchResults) (int64, error) {
	if err := readBegin(br, 2); err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, err
	}
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// endBounded ends the reservation after a failed statement of Save. If
// the statement outlived Save's bound, pgx has closed the connection, but
// its backend may still be running it, waiting for a synchronous standby
// to confirm the COMMIT: unaware that its client is gone, it would hold
// the key's lock (and the row's) for as long as the standby stays away,
// and the retry that should replay the response would wait for it. So
// the server is asked to cancel it, which commits it on the primary alone
// or rolls it back, and lets the lock go. r.mu is held.
func (r *reservation) endBounded(ctx context.Context) {
	cancelAbandoned(ctx, r.conn)
	r.end(false)
}

// cancelAbandoned asks the server to cancel what conn's backend runs, if
// ctx has ended: pgx then closed conn mid-statement (see endBounded).
func cancelAbandoned(ctx context.Context, conn *pgxpool.Conn) {
	if ctx.Err() == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	conn.Conn().PgConn().CancelRequest(cctx) //nolint:errcheck // closing the connection may do it too, later
}

func (r *reservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.end(r.tx.Rollback(ctx) == nil)
}

// end gives the connection back: to the pool when its transaction ended
// cleanly, else closed, which is the rollback and unlock of last resort.
// r.mu is held.
func (r *reservation) end(clean bool) {
	if clean && r.conn.Conn().PgConn().TxStatus() == 'I' {
		r.conn.Release()
	} else {
		discard(r.conn)
	}
	r.conn, r.tx = nil, nil
	<-r.p.slots
}
