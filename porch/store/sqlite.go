package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver

	"github.com/writeonce/porch-go/porch"
)

// Defaults for [Options].
const (
	// DefaultQueueSize is porch.DefaultPoolSize × porch.DefaultMailbox: the
	// committer can hold one write for every job the pool's mailboxes hold.
	DefaultQueueSize = porch.DefaultPoolSize * porch.DefaultMailbox
	DefaultMaxBatch  = 4096
	DefaultPruneRows = 64
)

// Options configure a store. The zero value is ready to use.
type Options struct {
	// Clock supplies the wall and monotonic readings. If nil,
	// porch.SystemClock{}.
	Clock porch.Clock
	// QueueSize bounds the committer's queue; a write waits while it is
	// full. Size it in proportion to the pool (size × mailbox). If zero,
	// DefaultQueueSize.
	QueueSize int
	// MaxBatch caps the writes one transaction carries. If zero,
	// DefaultMaxBatch.
	MaxBatch int
	// PruneRows is how many expired rows of each table one commit deletes
	// (on SQLite only stored responses: its counters live in the hit
	// journal while it runs, which cleaning keeps small).
	// If zero, DefaultPruneRows; negative disables pruning.
	PruneRows int
	// KeyConns is how many idempotency keys one process may hold at once
	// on a shared store (PostgreSQL), one connection each for the owner's
	// handler's whole run; a reservation beyond it fails with ErrNoKeyConn
	// and its request answers 503. If zero, DefaultPostgresKeyConns. SQLite
	// holds keys in memory and ignores it.
	KeyConns int
	// CommitDelay makes every commit take at least this long. It is fault
	// injection for tests and the acceptance gate (a slow disk); leave it
	// zero in production.
	CommitDelay time.Duration
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = porch.SystemClock{}
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.PruneRows == 0 {
		o.PruneRows = DefaultPruneRows
	}
	if o.KeyConns == 0 {
		o.KeyConns = DefaultPostgresKeyConns
	}
	return o
}

// SQLite is the embedded store: one SQLite file in WAL mode, written only by
// its committer with synchronous=FULL. The process that opens it is the only
// writer of porch's rows, which is what lets a limiter keep an exact
// in-memory view of its own keys. It is safe for concurrent use.
type SQLite struct {
	db       *sql.DB
	wconn    *sql.Conn // the committer's connection; the only writer of porch rows
	ckpt     *checkpointer
	commits  int // batches committed by writeBatch; only the committer touches it
	stmts    sqliteStmts
	opt      Options
	timeline porch.Timeline
	c        *committer
	seen     map[string]int // batch scratch: newest counter write per key
	unlock   func()         // releases the file's lock, after the database closes; see lockFile
	keys     keyLocks       // idempotency keys held by owners in this process
	// appStatement is set while the committer runs an application's
	// statement; authorize reads it. Only the committer touches it.
	appStatement bool
	claims       policyClaims // the rate policies this process counts under
	jr           journal      // the hit journal's bookkeeping; see journal.go
}

type sqliteStmts struct {
	upsertResponse, deleteResponse, pruneResponses *sql.Stmt // on the writer
	loadResponse                                   *sql.Stmt // on the reader pool
}

var (
	_ Store             = (*SQLite)(nil)
	_ ExclusiveCounters = (*SQLite)(nil)
)

// OpenSQLite opens (creating if needed) the database at path, migrates its
// schema, anchors the timeline and starts the committer.
func OpenSQLite(path string, opt Options) (*SQLite, error) {
	opt = opt.withDefaults()
	unlock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	// Escape the path: a '#' or '?' in a file name must not end the URI's path.
	db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		unlock()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// Idle readers close, and their page caches go with them: memory
	// follows the load rather than its peak.
	db.SetConnMaxIdleTime(time.Minute)
	s := &SQLite{db: db, opt: opt, seen: make(map[string]int), unlock: unlock}
	if err := s.init(context.Background()); err != nil {
		s.closeDB()
		unlock()
		return nil, openError(path, err)
	}
	s.c = newCommitter(s, opt.Clock, opt.QueueSize, opt.MaxBatch)
	return s, nil
}

func (s *SQLite) init(ctx context.Context) error {
	if err := migrateSQLite(ctx, s.db); err != nil {
		return err
	}
	var newest int64
	if err := s.db.QueryRowContext(ctx, sqlNewest).Scan(&newest); err != nil {
		return fmt.Errorf("store: read newest time: %w", err)
	}
	s.timeline = porch.NewTimeline(s.opt.Clock, time.UnixMilli(newest))
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: writer connection: %w", err)
	}
	s.wconn = conn
	if err := conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		c.RegisterAuthorizer(s.authorize)
		return nil
	}); err != nil {
		return fmt.Errorf("store: writer connection: %w", err)
	}
	// The checkpointer copies the WAL back off the request path, but only
	// the writer can start the WAL over once it is copied: a checkpointer
	// racing a committer that always appends never sees it whole. So the
	// writer keeps SQLite's own checkpoint at 1000 pages, which finds the
	// frames already copied and costs little, and the WAL is cut back to
	// journal_size_limit when it restarts.
	if _, err := conn.ExecContext(ctx, "PRAGMA journal_size_limit = 67108864"); err != nil {
		return fmt.Errorf("store: writer connection: %w", err)
	}
	ckconn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: checkpoint connection: %w", err)
	}
	s.ckpt = newCheckpointer(ckconn)
	if s.stmts.loadResponse, err = s.db.PrepareContext(ctx, sqlLoadResponse); err != nil {
		return fmt.Errorf("store: prepare: %w", err)
	}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.upsertResponse, sqlUpsertResponse},
		{&s.stmts.deleteResponse, sqlDeleteExpiredResponse},
		{&s.stmts.pruneResponses, sqlPruneResponses},
	} {
		if *p.dst, err = conn.PrepareContext(ctx, p.sql); err != nil {
			return fmt.Errorf("store: prepare: %w", err)
		}
	}
	return s.openJournal(ctx)
}

func migrateSQLite(ctx context.Context, db *sql.DB) error {
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if version > len(sqliteMigrations) {
		return fmt.Errorf("store: schema version %d is newer than this build knows (%d)", version, len(sqliteMigrations))
	}
	for v := version; v < len(sqliteMigrations); v++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("store: migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, sqliteMigrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("store: migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("store: migrate to %d: %w", v+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("store: migrate to %d: %w", v+1, err)
		}
	}
	return nil
}

// DB is the underlying database, for an application's own tables. Porch's
// tables must not be written through it.
func (s *SQLite) DB() *sql.DB { return s.db }

// Now reads the store's timeline.
func (s *SQLite) Now() time.Time { return s.timeline.Now() }

// Wall reads the wall clock.
func (s *SQLite) Wall() time.Time { return s.timeline.Wall() }

// LoadCounters calls fn for every counter still open at now.
func (s *SQLite) LoadCounters(ctx context.Context, now time.Time, fn func(Counter)) error {
	rows, err := s.db.QueryContext(ctx, sqlLoadCounters, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("store: load counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c Counter
		var start, window int64
		if err := rows.Scan(&c.Key, &start, &window, &c.Count); err != nil {
			return fmt.Errorf("store: load counters: %w", err)
		}
		c.WindowStart = time.UnixMilli(start)
		c.Window = time.Duration(window) * time.Millisecond
		fn(c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: load counters: %w", err)
	}
	return nil
}

// SaveCounter queues an append of c to the hit journal.
func (s *SQLite) SaveCounter(c Counter, done func(error)) error {
	return s.c.enqueue(op{counter: &c, done: done})
}

// LoadResponse reads key's stored response, expired or not. Middleware reads
// through a Reservation, which treats an expired row as absent.
func (s *SQLite) LoadResponse(ctx context.Context, key string) (Response, bool, error) {
	r := Response{Key: key}
	var created, expires int64
	err := s.stmts.loadResponse.QueryRowContext(ctx, key).
		Scan(&r.Digest, &r.Status, &r.ContentType, &r.Body, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Response{}, false, nil
	}
	if err != nil {
		return Response{}, false, fmt.Errorf("store: load response: %w", err)
	}
	r.Created, r.Expires = time.UnixMilli(created), time.UnixMilli(expires)
	return r, true, nil
}

// SaveResponse queues an upsert of r.
func (s *SQLite) SaveResponse(r Response, done func(error)) error {
	return s.c.enqueue(op{response: &r, done: done})
}

// DeleteResponse queues the prune of key's expired row.
func (s *SQLite) DeleteResponse(key string, now time.Time, done func(error)) error {
	return s.c.enqueue(op{delete: &deletion{key: key, now: now.UnixMilli()}, done: done})
}

// Reserve holds key for its owner, waiting under ctx while another owner in
// this process holds it: one process writes a SQLite file, so an in-memory
// lock is all the exclusion it needs, even with several middlewares on the
// store.
func (s *SQLite) Reserve(ctx context.Context, key string) (Reservation, error) {
	if err := s.keys.lock(ctx, key); err != nil {
		return nil, fmt.Errorf("store: reserve: %w", err)
	}
	return &sqliteReservation{s: s, key: key}, nil
}

// sqliteReservation queues the owner's statements and hands them to the
// committer with the response: SQLite has one writer, so the owner cannot
// hold a transaction of its own for its handler's whole run without
// stalling every other write. The cost is that the owner cannot read its
// own writes, and learns of a failed statement only from Save.
type sqliteReservation struct {
	s   *SQLite
	key string

	mu    sync.Mutex // protects owner and ended
	owner []execOp
	ended bool
}

func (r *sqliteReservation) Load(ctx context.Context) (Response, bool, error) {
	res, ok, err := r.s.LoadResponse(ctx, r.key)
	if err != nil || !ok {
		return Response{}, false, err
	}
	now := r.s.Now()
	if now.Before(res.Expires) {
		return res, true, nil
	}
	// Prune on access; the owner's write, queued later, lands after it.
	if err := r.s.DeleteResponse(r.key, now, nil); err != nil {
		return Response{}, false, err
	}
	return Response{}, false, nil
}

func (r *sqliteReservation) Exec(ctx context.Context, query string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return ErrReleased
	}
	r.owner = append(r.owner, execOp{query: query, args: args})
	return nil
}

func (r *sqliteReservation) Save(ctx context.Context, res Response, ttl time.Duration) error {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return ErrReleased
	}
	owner := r.owner
	r.owner, r.ended = nil, true
	r.mu.Unlock()
	// The key is given up only once the commit has answered, so that the
	// next owner's Load sees the stored row.
	defer r.s.keys.unlock(r.key)
	res.Key = r.key
	res.Created = r.s.Now()
	res.Expires = res.Created.Add(ttl)
	// Not bounded by ctx: waiting less would not undo the write, and the
	// owner must know whether its response is stored.
	return r.s.c.do(context.WithoutCancel(ctx), op{response: &res, owner: owner})
}

func (r *sqliteReservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.s.keys.unlock(r.key)
	}
	r.owner, r.ended = nil, true
}

// Stats reports the committer's counters.
func (s *SQLite) Stats() Stats { return s.c.stats() }

// Close commits every queued write, then closes the database. If ctx ends
// first it returns ctx.Err() and leaves the flush running.
func (s *SQLite) Close(ctx context.Context) error {
	if err := s.c.closeCtx(ctx); err != nil {
		return err
	}
	err := s.foldJournal(context.WithoutCancel(ctx))
	if cerr := s.closeDB(); err == nil {
		err = cerr
	}
	s.unlock() // after the database: the next process must find it closed
	if err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// writeBatch runs on the committer goroutine: one IMMEDIATE transaction for
// the whole batch, a bounded prune first, then the newest write per counter
// key (the limiter's actor is the only writer of its keys and writes absolute
// counts, so earlier writes of a key in the same batch are superseded).
//
// An application's statement (Exec, or an owner's) that ends the whole
// transaction itself (INSERT OR ROLLBACK, a trigger's RAISE(ROLLBACK))
// takes nothing with it: the batch is written again without it, and only
// its caller learns the error.
func (s *SQLite) writeBatch(batch []op) error {
	for range len(batch) + 1 {
		err := s.writeBatchOnce(batch)
		var ab *appAborted
		if !errors.As(err, &ab) {
			return err
		}
		batch[ab.index].dropped = true
		for i := range batch {
			if !batch[i].dropped {
				batch[i].failed = nil // the next pass decides afresh
			}
		}
		batch[ab.index].failed = ab.err
	}
	return errors.New("store: batch aborted by every write in it") // unreachable: each pass drops one
}

// appAborted reports an application's statement that rolled back the
// batch's whole transaction.
type appAborted struct {
	index int
	err   error
}

func (a *appAborted) Error() string { return a.err.Error() }

func (s *SQLite) writeBatchOnce(batch []op) (err error) {
	ctx := context.Background()
	if s.opt.CommitDelay > 0 {
		time.Sleep(s.opt.CommitDelay) // fault injection: a slow disk
	}
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("store: begin batch: %w", err)
	}
	s.jr.begin()
	defer func() {
		if err != nil {
			s.wconn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the batch already failed
		}
	}()
	if s.opt.PruneRows > 0 {
		// No counters prune: while the store runs porch_rate_counters is
		// empty, and the journal's cleaning drops expired counts.
		now := s.Now().UnixMilli()
		if _, err := s.stmts.pruneResponses.ExecContext(ctx, now, s.opt.PruneRows); err != nil {
			return fmt.Errorf("store: prune responses: %w", err)
		}
	}
	clear(s.seen)
	for i := range batch {
		if c := batch[i].counter; c != nil {
			s.seen[c.Key] = i
		}
	}
	for i := range batch {
		if err := s.apply(ctx, batch, i); err != nil {
			return err
		}
	}
	if err := s.cleanJournal(ctx); err != nil {
		return err
	}
	if _, err := s.wconn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("store: commit batch: %w", err)
	}
	s.jr.commit()
	if s.commits++; s.commits%checkpointEvery == 0 {
		s.ckpt.poke()
	}
	return nil
}

func (s *SQLite) apply(ctx context.Context, batch []op, i int) error {
	o := batch[i]
	if o.dropped {
		return nil
	}
	switch {
	case o.counter != nil:
		c := o.counter
		if s.seen[c.Key] != i {
			return nil // a newer write of this key is in the batch
		}
		if err := s.appendCounter(ctx, c); err != nil {
			return err
		}
	case o.response != nil && len(o.owner) > 0:
		ownErr, txErr := s.inSavepoint(ctx, func() error { return s.applyOwner(ctx, o) })
		if errors.Is(txErr, errTxGone) {
			return &appAborted{index: i, err: fmt.Errorf("%w: %w", ErrWriteFailed, ownErr)}
		}
		if txErr != nil {
			return fmt.Errorf("store: save response: %w", txErr)
		}
		batch[i].failed = ownErr
	case o.response != nil:
		if err := s.upsertResponse(ctx, o.response); err != nil {
			return err
		}
	case o.delete != nil:
		if _, err := s.stmts.deleteResponse.ExecContext(ctx, o.delete.key, o.delete.now); err != nil {
			return fmt.Errorf("store: delete response: %w", err)
		}
	case o.exec != nil:
		execErr, txErr := s.inSavepoint(ctx, func() error { return s.execApp(ctx, o.exec) })
		if errors.Is(txErr, errTxGone) {
			return &appAborted{index: i, err: execErr}
		}
		if txErr != nil {
			return fmt.Errorf("store: exec: %w", txErr)
		}
		batch[i].failed = execErr
	case o.probe:
		return s.writeProbe(ctx)
	}
	return nil
}

func (s *SQLite) upsertResponse(ctx context.Context, r *Response) error {
	body := r.Body
	if body == nil {
		body = []byte{} // an empty response (a 204) is a value, not NULL
	}
	if _, err := s.stmts.upsertResponse.ExecContext(ctx, r.Key, r.Digest, r.Status, r.ContentType, body,
		r.Created.UnixMilli(), r.Expires.UnixMilli()); err != nil {
		return fmt.Errorf("store: save response: %w", err)
	}
	return nil
}

// applyOwner runs an idempotency owner's statements, then stores its
// response: inside one savepoint, so that they commit together or not at
// all. A statement that fails on its own terms (a constraint, a bad query)
// is ErrWriteFailed; anything else (a full disk) is the store failing.
func (s *SQLite) applyOwner(ctx context.Context, o op) error {
	for _, e := range o.owner {
		if err := s.execApp(ctx, &e); err != nil {
			if ownersFault(err) {
				return fmt.Errorf("%w: %w", ErrWriteFailed, err)
			}
			return fmt.Errorf("store: owner's write: %w", err)
		}
	}
	return s.upsertResponse(ctx, o.response)
}

// ownersFault tells a statement that failed because of what it says (a
// constraint, a syntax error, a type mismatch) from one the database could
// not carry out (a full disk, an I/O error), which is not the owner's fault
// and may pass on a retry.
func ownersFault(err error) bool {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return true // the driver refused it before SQLite saw it: bad arguments
	}
	switch se.Code {
	case sqlite3.ErrConstraint, sqlite3.ErrError, sqlite3.ErrMismatch, sqlite3.ErrRange, sqlite3.ErrTooBig, sqlite3.ErrAuth:
		return true
	}
	return false
}

// execApp runs an application's statement on the writer, with transaction
// control refused (see authorize).
func (s *SQLite) execApp(ctx context.Context, e *execOp) error {
	s.appStatement = true
	defer func() { s.appStatement = false }()
	_, err := s.wconn.ExecContext(ctx, e.query, e.args...)
	return err
}

// authorize is the writer connection's SQLite authorizer. While an
// application's statement is being prepared it refuses transaction control
// (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE), ATTACH, DETACH and PRAGMA:
// one of them would commit, undo or reconfigure the batch's transaction,
// which holds other callers' writes. SQLite calls it on the committer's
// goroutine, while that goroutine prepares a statement, so appStatement
// needs no lock.
func (s *SQLite) authorize(action int, _, _, _ string) int {
	if !s.appStatement {
		return sqlite3.SQLITE_OK
	}
	switch action {
	case sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT, sqlite3.SQLITE_ATTACH,
		sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA:
		return sqlite3.SQLITE_DENY
	}
	return sqlite3.SQLITE_OK
}

// errTxGone reports that a statement ended the batch's whole transaction.
var errTxGone = errors.New("store: the statement rolled back the whole transaction")

// inTransaction reports whether the writer is still inside the batch's
// transaction: a statement with a ROLLBACK conflict clause, or a trigger's
// RAISE(ROLLBACK), ends it without any statement the authorizer sees.
func (s *SQLite) inTransaction() bool {
	in := true
	s.wconn.Raw(func(dc any) error { //nolint:errcheck // the callback cannot fail
		if c, ok := dc.(*sqlite3.SQLiteConn); ok {
			in = !c.AutoCommit()
		}
		return nil
	})
	return in
}

// inSavepoint runs fn inside a savepoint, so that its failure (a
// constraint, a typo) is its caller's alone, ownErr, and the rest of the
// batch still commits. An error of the savepoint itself, txErr, leaves the
// transaction in doubt and fails the whole batch; errTxGone says fn ended
// the transaction itself, so nothing of the batch was written.
func (s *SQLite) inSavepoint(ctx context.Context, fn func() error) (ownErr, txErr error) {
	if _, err := s.wconn.ExecContext(ctx, "SAVEPOINT porch_exec"); err != nil {
		return nil, err
	}
	if ownErr = fn(); ownErr != nil {
		if !s.inTransaction() {
			return ownErr, errTxGone
		}
		if _, err := s.wconn.ExecContext(ctx, "ROLLBACK TO porch_exec"); err != nil {
			return ownErr, err
		}
	}
	if _, err := s.wconn.ExecContext(ctx, "RELEASE porch_exec"); err != nil {
		return ownErr, err
	}
	return ownErr, nil
}

// Exec runs an application's write in the committer's next transaction and
// returns once that transaction has committed. A SQLite file has one writer
// at a time: an application writing through its own connection contends
// with the committer for the write lock, and SQLite's busy handler sleeps
// in steps of up to 100 ms while it waits. Through Exec the write joins
// group commit instead. Its own failure is returned to its caller alone; it
// cannot roll back other callers' writes. If ctx ends first Exec returns
// ctx.Err() and the write may still commit: pass context.WithoutCancel to
// always learn its outcome, as the storefront does for its orders.
func (s *SQLite) Exec(ctx context.Context, query string, args ...any) error {
	if err := s.c.do(ctx, op{exec: &execOp{query: query, args: args}}); err != nil {
		return fmt.Errorf("store: exec: %w", err)
	}
	return nil
}
