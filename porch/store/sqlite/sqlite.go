//go:build cgo

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/header"
	"github.com/writeonce/porch-go/porch/store/internal/keylock"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
)

// ErrLocked is returned by Open when the database file is already open, in
// another process or this one, by any of its names (a symlink, a hard
// link): one process per SQLite file is what keeps its counts exact.
// Several instances share a PostgreSQL store instead.
var ErrLocked = errors.New("sqlite: database file already open")

// ErrFileGone is returned by every write, and by Health, once the database
// file or its WAL no longer has the name the store opened it by (deleted, or
// replaced by another file). SQLite would go on writing into the nameless
// file and report success, and everything written from then on would be
// lost at the next restart; failing closed is the only honest answer. It
// needs the files' identities (device and inode), so only a Unix build
// detects it; elsewhere it is never returned.
var ErrFileGone = errors.New("sqlite: the database file was deleted or replaced while open")

// Store is the embedded store: one SQLite file in WAL mode, written only by
// its committer with synchronous=FULL (NORMAL for a batch of counts alone
// under store.SurvivesProcessCrash). The process that opens it is the only
// writer of porch's rows, which is what lets a limiter keep an exact
// in-memory view of its own keys. Create it with [Open]; it is safe for
// concurrent use.
//
// Pass it to rate.New, idem.New or kit; an application calls Close, Health, Stats, DB and Exec. Its
// other methods implement porch/store/driver for those packages and are
// not for calling directly.
type Store struct {
	db       *sql.DB
	wconn    *sql.Conn // the committer's connection; the only writer of porch rows
	ckpt     *checkpointer
	commits  int // batches committed by writeBatch; only the committer touches it
	stmts    preparedStmts
	opt      Options
	timeline timeline
	c        *commit.Committer
	seen     map[string]int // batch scratch: newest counter write per key
	unlock   func()         // releases the file's lock, after the database closes; see lockFile
	keys     keylock.Locks  // idempotency keys held by owners in this process
	files    files          // the database and WAL names, checked before each commit
	// appStatement is set while the committer runs an application's
	// statement; authorize reads it. Only the committer touches it.
	appStatement bool
	// appDeadline ends the batch's time for applications' statements, and
	// appRan records that one ran in this pass (see deferApp). Only the
	// committer touches them.
	appDeadline time.Time
	appRan      bool
	// isolate runs applications' statements each in a savepoint: set once
	// a pass of the batch has had one fail (see applyBare). Only the
	// committer touches it.
	isolate bool
	// isolating counts down the batches whose first pass still runs
	// applications' statements in savepoints, after one had a failure
	// (see writeBatch). Only the committer touches it.
	isolating int
	passes    int           // passes written, all batches together: for tests
	refusal   string        // why authorize refused the statement being prepared, if it did
	ownLimits ownLimits     // the writer's limits outside applications' statements; see limits.go
	claims    policy.Claims // the rate policies this process counts under
	jr        journal       // the hit journal's bookkeeping; see journal.go
	// responsesDue is when (store ms) a stored response may first have
	// expired, so that a commit before it skips the responses prune; see
	// pruneResponses. Only the committer touches it, after open.
	responsesDue int64
	savedDue     int64      // the earliest expiry saved by the batch being written
	stored       storedKeys // keys that may have a live response; see stored.go
	rows         responseRows
	// synchronous is the writer's synchronous level (see
	// batchSynchronous): FULL as the DSN opens it. Only the committer
	// touches it, and Close once the committer has stopped.
	synchronous string
}

type preparedStmts struct {
	deleteResponse, pruneResponses *sql.Stmt // on the writer (responses are upserted by rows)
	loadResponse                   *sql.Stmt // on the reader pool
}

var (
	_ driver.Store             = (*Store)(nil)
	_ driver.ExclusiveCounters = (*Store)(nil)
	_ driver.Slots             = (*Store)(nil)
)

// Open opens (creating if needed) the database at path, migrates its
// schema, anchors the timeline and starts the committer. It fails with
// ErrLocked while another store has the file open.
func Open(path string, opt Options) (*Store, error) {
	opt.Options = commit.WithDefaults(opt.Options)
	if err := commit.CheckDurability("sqlite", opt.Durability); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("sqlite: open: the path is empty; name a database file, such as ./porch.db")
	}
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
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// Idle readers close, and their page caches go with them: memory
	// follows the load rather than its peak.
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, opt: opt, seen: make(map[string]int), unlock: unlock, synchronous: synchronousFull}
	if err := s.init(context.Background()); err != nil {
		s.closeDB()
		unlock()
		return nil, openError(path, err)
	}
	if s.files, err = s.watchFiles(context.Background()); err != nil {
		s.closeDB()
		unlock()
		return nil, openError(path, err)
	}
	s.c = commit.NewGathering(s.writeBatch, opt.Clock, opt.QueueSize, opt.MaxBatch, opt.Observer, commitGather)
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	if err := migrateSQLite(ctx, s.db); err != nil {
		return err
	}
	var newest int64
	if err := s.db.QueryRowContext(ctx, sqlNewest).Scan(&newest); err != nil {
		return fmt.Errorf("sqlite: read newest time: %w", err)
	}
	s.timeline = newTimeline(s.opt.Clock, time.UnixMilli(newest))
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: writer connection: %w", err)
	}
	s.wconn = conn
	if err := conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		c.RegisterAuthorizer(s.authorize)
		s.ownLimits.read(c)
		return s.rows.prepare(s, c)
	}); err != nil {
		return fmt.Errorf("sqlite: writer connection: %w", err)
	}
	// The checkpointer copies the WAL back off the request path, but only
	// the writer can start the WAL over once it is copied: a checkpointer
	// racing a committer that always appends never sees it whole. So the
	// writer keeps SQLite's own checkpoint at 1000 pages, which finds the
	// frames already copied and costs little, and the WAL is cut back to
	// journal_size_limit when it restarts.
	if _, err := conn.ExecContext(ctx, "PRAGMA journal_size_limit = 67108864"); err != nil {
		return fmt.Errorf("sqlite: writer connection: %w", err)
	}
	ckconn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: checkpoint connection: %w", err)
	}
	s.ckpt = newCheckpointer(ckconn, s.opt.Logger)
	if s.stmts.loadResponse, err = s.db.PrepareContext(ctx, sqlLoadResponse); err != nil {
		return fmt.Errorf("sqlite: prepare: %w", err)
	}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.deleteResponse, sqlDeleteExpiredResponse},
		{&s.stmts.pruneResponses, sqlPruneResponses},
	} {
		if *p.dst, err = conn.PrepareContext(ctx, p.sql); err != nil {
			return fmt.Errorf("sqlite: prepare: %w", err)
		}
	}
	if err := s.stored.load(ctx, s); err != nil {
		return err
	}
	if err := s.wconn.QueryRowContext(ctx, sqlResponsesDue, int64(math.MaxInt64)).Scan(&s.responsesDue); err != nil {
		return fmt.Errorf("sqlite: read responses: %w", err)
	}
	return s.openJournal(ctx)
}

func migrateSQLite(ctx context.Context, db *sql.DB) error {
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if version > len(sqliteMigrations) {
		return fmt.Errorf("sqlite: schema version %d is newer than this build knows (%d)", version, len(sqliteMigrations))
	}
	for v := version; v < len(sqliteMigrations); v++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlite: migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, sqliteMigrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migrate to %d: %w", v+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migrate to %d: %w", v+1, err)
		}
	}
	return nil
}

// DB is the underlying database, for an application's own tables. Porch's
// tables must not be written through it.
func (s *Store) DB() *sql.DB { return s.db }

// Now reads the store's timeline.
func (s *Store) Now() time.Time { return s.timeline.now() }

// Wall reads the wall clock.
func (s *Store) Wall() time.Time { return s.timeline.wall() }

// LoadCounters calls fn for every counter still open at now.
func (s *Store) LoadCounters(ctx context.Context, now time.Time, fn func(driver.Counter)) error {
	rows, err := s.db.QueryContext(ctx, sqlLoadCounters, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("sqlite: load counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c driver.Counter
		var start, window, expires int64
		if err := rows.Scan(&c.Key, &start, &window, &c.Count, &c.Prev, &expires); err != nil {
			return fmt.Errorf("sqlite: load counters: %w", err)
		}
		c.Start = time.UnixMilli(start)
		c.Window = time.Duration(window) * time.Millisecond
		c.Expires = time.UnixMilli(expires)
		fn(c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: load counters: %w", err)
	}
	return nil
}

// SaveCounter queues an upsert of c.
func (s *Store) SaveCounter(c driver.Counter, done func(error)) error {
	return s.c.Enqueue(commit.Op{Counter: &c, Done: done})
}

// loadResponse reads key's stored response, expired or not. Middleware reads
// through a Reservation, which treats an expired row as absent.
func (s *Store) loadResponse(ctx context.Context, key string) (driver.Response, bool, error) {
	r := driver.Response{Key: key}
	var created, expires int64
	var headers []byte
	err := s.stmts.loadResponse.QueryRowContext(ctx, key).
		Scan(&r.Digest, &r.Status, &r.ContentType, &r.Body, &created, &expires, &headers)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Response{}, false, nil
	}
	if err != nil {
		return driver.Response{}, false, fmt.Errorf("sqlite: load response: %w", err)
	}
	r.Created, r.Expires = time.UnixMilli(created), time.UnixMilli(expires)
	r.Header = header.Decode(headers)
	return r, true, nil
}

// deleteResponse queues the prune of key's expired row.
func (s *Store) deleteResponse(key string, now time.Time, done func(error)) error {
	return s.c.Enqueue(commit.Op{Delete: &commit.Deletion{Key: key, Now: now.UnixMilli()}, Done: done})
}

// Reserve holds key for its owner, waiting under ctx while another owner in
// this process holds it: one process writes a SQLite file, so an in-memory
// lock is all the exclusion it needs, even with several middlewares on the
// store.
func (s *Store) Reserve(ctx context.Context, key string) (driver.Reservation, error) {
	if err := s.keys.Lock(ctx, key); err != nil {
		return nil, fmt.Errorf("sqlite: reserve: %w", err)
	}
	return &reservation{s: s, key: key}, nil
}

// Inspect reads key's stored response unless an owner in this process
// holds key (store.ErrKeyHeld). It holds key while it reads, so that no
// owner starts meanwhile.
func (s *Store) Inspect(ctx context.Context, key string) (driver.Response, bool, error) {
	if !s.keys.TryLock(key) {
		return driver.Response{}, false, fmt.Errorf("sqlite: inspect: %w", store.ErrKeyHeld)
	}
	defer s.keys.Unlock(key)
	res, ok, err := s.loadResponse(ctx, key)
	if err != nil || !ok || !s.Now().Before(res.Expires) {
		return driver.Response{}, false, err
	}
	return res, true, nil
}

// Forget deletes key's stored response in the committer's next
// transaction and returns once it has committed, holding key meanwhile so
// that no owner reads the row about to go. It fails with store.ErrKeyHeld
// while an owner holds key.
func (s *Store) Forget(ctx context.Context, key string) error {
	if !s.keys.TryLock(key) {
		return fmt.Errorf("sqlite: forget: %w", store.ErrKeyHeld)
	}
	defer s.keys.Unlock(key)
	// The prune of a row expiring before the end of time: any row of key.
	del := &commit.Deletion{Key: key, Now: math.MaxInt64}
	if err := s.c.Do(ctx, commit.Op{Delete: del}); err != nil {
		return fmt.Errorf("sqlite: forget: %w", err)
	}
	return nil
}

// reservation queues the owner's statements and hands them to the
// committer with the response: SQLite has one writer, so the owner cannot
// hold a transaction of its own for its handler's whole run without
// stalling every other write. The cost is that the owner cannot read its
// own writes, and learns of a failed statement only from Save.
type reservation struct {
	s   *Store
	key string

	mu    sync.Mutex // protects owner, failed and ended
	owner []commit.Statement
	// failed is the first of the owner's statements refused before it
	// was queued (an argument that does not convert): Save fails with it,
	// so that none of the owner's writes is stored without it.
	failed error
	ended  bool
}

func (r *reservation) Load(ctx context.Context) (driver.Response, bool, error) {
	r.mu.Lock()
	ended := r.ended
	r.mu.Unlock()
	if ended {
		// The key is no longer held: another owner may be writing it.
		return driver.Response{}, false, driver.ErrReleased
	}
	if !r.s.stored.mayHave(r.key) {
		return driver.Response{}, false, nil // no live row: see storedKeys
	}
	res, ok, err := r.s.loadResponse(ctx, r.key)
	if err != nil || !ok {
		return driver.Response{}, false, err
	}
	now := r.s.Now()
	if now.Before(res.Expires) {
		return res, true, nil
	}
	// Prune on access; the owner's write, queued later, lands after it.
	if err := r.s.deleteResponse(r.key, now, nil); err != nil {
		return driver.Response{}, false, err
	}
	return driver.Response{}, false, nil
}

func (r *reservation) Exec(ctx context.Context, query string, args ...any) error {
	args, err := valueArgs(args) // before the lock: it runs the application's Value methods
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return driver.ErrReleased
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", store.ErrWriteFailed, err)
		if r.failed == nil {
			r.failed = err
		}
		return err
	}
	r.owner = append(r.owner, commit.Statement{Query: query, Args: args})
	return nil
}

func (r *reservation) Save(ctx context.Context, res driver.Response, ttl time.Duration) error {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return driver.ErrReleased
	}
	owner, failed := r.owner, r.failed
	r.owner, r.ended = nil, true
	r.mu.Unlock()
	if failed != nil {
		r.s.keys.Unlock(r.key)
		return failed
	}
	// The key is given up only once the commit has answered, so that the
	// next owner's Load sees the stored row.
	defer r.s.keys.Unlock(r.key)
	res.Key = r.key
	res.Created = r.s.Now()
	res.Expires = res.Created.Add(ttl)
	// Before the row is queued, while the key is still held: the next
	// owner's Load must read it.
	r.s.stored.add(r.key, res.Expires.UnixMilli(), res.Created.UnixMilli())
	// Not bounded by ctx: waiting less would not undo the write, and the
	// owner must know whether its response is stored. (idem passes a
	// context that cannot end already: wrapping it again cost an
	// allocation a request.)
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	return r.s.c.Do(ctx, commit.Op{Response: &res, Owner: owner})
}

func (r *reservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.s.keys.Unlock(r.key)
	}
	r.owner, r.ended = nil, true
}

// Stats reports the committer's counters.
func (s *Store) Stats() store.Stats { return s.c.Stats() }

// Close commits every queued write, then closes the database. If ctx ends
// first it returns ctx.Err() and leaves the flush running.
func (s *Store) Close(ctx context.Context) error {
	if err := s.c.Close(ctx); err != nil {
		return err
	}
	err := s.foldJournal(context.WithoutCancel(ctx))
	if cerr := s.closeDB(); err == nil {
		err = cerr
	}
	s.unlock() // after the database: the next process must find it closed
	if err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
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
//
// The statement is held to an idempotency owner's rules (see
// driver.Reservation.Exec): row writes to the application's tables only,
// within Options.ExecBudget, since it runs on the same shared
// connection and holds up every other write while it runs.
//
// SQLite sees the budget's interrupt only between the steps of a
// statement, and one step can write or build a whole value, so an
// application's statement is also held to what one step may handle: a
// string or blob of at most 1 MiB, bound or built (a larger argument is
// refused before the statement runs, a larger result fails it; both wrap
// ErrRefused), statement text of at most 64 KiB, and LIKE and GLOB
// patterns of at most 50 bytes. Writing or building one such value takes
// milliseconds; a larger one goes through DB(), outside group commit. A
// statement that still finishes past its budget in a step SQLite could not
// interrupt is rolled back and fails with ErrExecBudget: it never
// commits, though its batch waits for it. Such steps remain, so the
// budget does not bound what an application's statement can make its
// batch, and every write of the process, wait: instr, replace, trim,
// ltrim, rtrim and unhex take time in proportion to the product of their
// two arguments' lengths, and a row with no loop in it (a SELECT list or
// VALUES row of expressions) is one step however many 1 MiB values its
// terms build or scan, so its time grows with the statement's length.
// Either can hold the batch for seconds within the limits above;
// docs/performance.md gives measured figures and the benchmark that
// makes them. Keep such work out of Exec, or bound the values and
// statements an application's users can put into it.
func (s *Store) Exec(ctx context.Context, query string, args ...any) error {
	args, err := valueArgs(args)
	if err != nil {
		return fmt.Errorf("sqlite: exec: %w", err)
	}
	if err := s.c.Do(ctx, commit.Op{Exec: &commit.Statement{Query: query, Args: args}}); err != nil {
		return fmt.Errorf("sqlite: exec: %w", err)
	}
	return nil
}

// commitGather bounds how long a batch waits for more writes while writes
// are arriving together (see commit.NewGathering). On SQLite a commit's
// own work (its WAL frames, the fsync, BEGIN, the files check) was most
// of what a first hit cost at 16 connections, where a commit served 6 to
// 7 requests; 200 µs is about four requests' worth of arrivals there, and
// about a third of a commit's time. PostgreSQL and Redis do not wait: a
// batch there is a round trip to a server, whose own group commit (or
// none, on Redis) is what shares the disk.
const commitGather = 200 * time.Microsecond

// SlotsShared reports false: one process writes a SQLite file (see
// Open's lock), so the in-flight limiter counts slots in its actors, in
// memory, and a process that dies takes its slots with it (see
// driver.Slots).
func (s *Store) SlotsShared() bool { return false }
