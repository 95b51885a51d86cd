package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/header"
)

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
	if err := readCommit(br); err != nil {
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
