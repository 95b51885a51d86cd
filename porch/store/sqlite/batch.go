//go:build cgo

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// writeBatch runs on the committer goroutine: one IMMEDIATE transaction for
// the whole batch, a bounded prune first, then the newest write per counter
// key (the limiter's actor is the only writer of its keys and writes absolute
// counts, so earlier writes of a key in the same batch are superseded).
//
// An application's statement (Exec, or an owner's) that ends the whole
// transaction itself (INSERT OR ROLLBACK, a trigger's RAISE(ROLLBACK))
// takes nothing with it: the batch is written again without it, and only
// its caller learns the error.
func (s *Store) writeBatch(batch []commit.Op) error {
	s.appDeadline = time.Time{}
	if b := s.execBudget(); b > 0 {
		s.appDeadline = time.Now().Add(b)
	}
	s.appRan = false // across passes: a pass written again must not run another owner first
	// The first pass runs applications' statements bare (see applyBare),
	// unless a recent batch had one fail: then in savepoints from the
	// start, so that a client sending failing writes on purpose costs its
	// neighbours a savepoint each, not a second pass of every batch.
	s.isolate = s.isolating > 0
	err := s.writePasses(batch)
	s.noteFailures(batch)
	return err
}

// isolateAfterFailure is how many batches in a row must have no failing
// application statement before the first pass runs bare again.
const isolateAfterFailure = 64

// noteFailures counts batch towards the clean streak that lets first
// passes run bare again, or, if an application's statement in it failed,
// starts the streak over.
func (s *Store) noteFailures(batch []commit.Op) {
	for i := range batch {
		if o := &batch[i]; o.Failed != nil && (o.Exec != nil || len(o.Owner) > 0) {
			s.isolating = isolateAfterFailure
			return
		}
	}
	if s.isolating > 0 {
		s.isolating--
	}
}

// writePasses writes batch, again without any application statement that
// aborted the whole transaction, until a pass commits or fails on its own.
func (s *Store) writePasses(batch []commit.Op) error {
	for range len(batch) + 1 {
		for i := range batch {
			batch[i].Deferred = false // each pass decides afresh
		}
		err := s.writeBatchOnce(batch)
		var ab *appAborted
		if !errors.As(err, &ab) {
			return err
		}
		batch[ab.index].Dropped = true
		for i := range batch {
			if !batch[i].Dropped {
				batch[i].Failed = nil // the next pass decides afresh
			}
		}
		batch[ab.index].Failed = ab.err
		s.isolate = true // a batch that had one failure may have more: one more pass each is enough
	}
	return errors.New("sqlite: batch aborted by every write in it") // unreachable: each pass drops one
}

// appAborted reports an application's statement that rolled back the
// batch's whole transaction.
type appAborted struct {
	index int
	err   error
}

func (a *appAborted) Error() string { return a.err.Error() }

func (s *Store) writeBatchOnce(batch []commit.Op) (err error) {
	s.passes++
	ctx := context.Background()
	if s.opt.CommitDelay > 0 {
		time.Sleep(s.opt.CommitDelay) // fault injection: a slow disk
	}
	level := s.batchSynchronous(batch)
	if err := s.setSynchronous(ctx, level); err != nil {
		return err
	}
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: begin batch: %w", err)
	}
	s.jr.begin()
	defer func() {
		if err != nil {
			s.wconn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the batch already failed
		}
	}()
	// No counters prune: while the store runs porch_rate_counters is
	// empty, and the journal's cleaning drops expired counts.
	due, err := s.pruneResponses(ctx)
	if err != nil {
		return err
	}
	s.savedDue = math.MaxInt64
	clear(s.seen)
	for i := range batch {
		if c := batch[i].Counter; c != nil {
			s.seen[c.Key] = i
		}
	}
	for i := 0; i < len(batch); {
		if j := counterRun(batch, i); j > i {
			if err := s.appendCounters(batch, i, j); err != nil {
				return err
			}
			i = j
			continue
		}
		if j := plainResponses(batch, i); j > i {
			if err := s.upsertRun(batch[i:j]); err != nil {
				return err
			}
			i = j
			continue
		}
		if err := s.apply(ctx, batch, i); err != nil {
			return err
		}
		i++
	}
	if err := s.cleanJournal(ctx); err != nil {
		return err
	}
	if err := s.files.check(); err != nil {
		return err
	}
	if _, err := s.wconn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("sqlite: commit batch: %w", err)
	}
	s.jr.commit()
	s.responsesDue = min(due, s.savedDue) // a response saved in this batch may be due sooner
	switch s.commits++; {
	case s.commits%checkpointEvery == 0:
		s.ckpt.poke()
	case level == synchronousNormal:
		s.ckpt.syncSoon() // its counts are on disk within syncWithin
	}
	return nil
}

// plainResponses returns the end of the run of plain responses (no
// owner's statements) that starts at batch[i], or i if there is none: a
// run is written in one call on the driver's connection (see
// responseRows), in the batch's order, since nothing else is between them.
func plainResponses(batch []commit.Op, i int) int {
	j := i
	for j < len(batch) && batch[j].Response != nil && len(batch[j].Owner) == 0 && !batch[j].Dropped {
		j++
	}
	return j
}

// apply writes batch[i], which is not a Counter (see appendCounters).
func (s *Store) apply(ctx context.Context, batch []commit.Op, i int) error {
	o := batch[i]
	if o.Dropped {
		return nil
	}
	switch {
	case o.Response != nil && len(o.Owner) > 0:
		if s.deferApp() {
			batch[i].Deferred = true
			return nil
		}
		if !s.isolate {
			return s.applyBare(i, s.applyOwner(ctx, o), func(err error) bool { return errors.Is(err, store.ErrWriteFailed) }, "save response")
		}
		ownErr, txErr := s.inSavepoint(ctx, func() error { return s.applyOwner(ctx, o) })
		if errors.Is(txErr, errTxGone) {
			if errors.Is(ownErr, store.ErrWriteFailed) {
				return &appAborted{index: i, err: ownErr}
			}
			// SQLite rolled the transaction back for its own reasons (a
			// full disk, an I/O error): the store failed, not the owner.
			return fmt.Errorf("sqlite: save response: %w", ownErr)
		}
		if txErr != nil {
			return fmt.Errorf("sqlite: save response: %w", txErr)
		}
		if ownErr != nil && !errors.Is(ownErr, store.ErrWriteFailed) {
			// Not the owner's statement but the store (a full disk, an I/O
			// error) failing to save a response: the batch fails, so that
			// every caller in it and Health learn it.
			return ownErr
		}
		batch[i].Failed = ownErr
	case o.Response != nil:
		return s.upsertResponse(o.Response)
	case o.Delete != nil:
		if _, err := s.stmts.deleteResponse.ExecContext(ctx, o.Delete.Key, o.Delete.Now); err != nil {
			return fmt.Errorf("sqlite: delete response: %w", err)
		}
	case o.Exec != nil:
		if s.deferApp() {
			batch[i].Deferred = true
			return nil
		}
		run := func() error {
			bctx, cancel := s.budget(ctx)
			defer cancel()
			return s.execApp(bctx, o.Exec)
		}
		if !s.isolate {
			// Any error of its own fails the Exec alone, as in a savepoint,
			// unless it took the transaction with it and was not its fault.
			return s.applyBare(i, run(), func(err error) bool { return s.inTransaction() || ownersFault(err) }, "exec")
		}
		execErr, txErr := s.inSavepoint(ctx, run)
		if errors.Is(txErr, errTxGone) {
			if ownersFault(execErr) {
				return &appAborted{index: i, err: execErr}
			}
			return fmt.Errorf("sqlite: exec: %w", execErr)
		}
		if txErr != nil {
			return fmt.Errorf("sqlite: exec: %w", txErr)
		}
		batch[i].Failed = execErr
	case o.Probe:
		return s.writeProbe(ctx)
	}
	return nil
}

// applyBare judges an application's statements (an owner's, or an Exec)
// that ran outside a savepoint. The first pass of a batch runs them so:
// a SAVEPOINT and a RELEASE per owner, each parsed and run by SQLite, were
// a quarter of the instructions of a batch of 32 owners of one INSERT each
// (BenchmarkWriteBatch/owner), and almost every batch has no failure to
// isolate. err is what they
// returned; alone reports whether it is theirs alone to bear, as a
// savepoint would have made it. Such a failure may have left earlier
// statements of theirs in the transaction, so the batch is rolled back and
// written again without them (appAborted), and in savepoints from then on:
// the first failure costs one more pass, later ones what they cost before.
// Any other error fails the batch, as the store's own failure.
func (s *Store) applyBare(i int, err error, alone func(error) bool, what string) error {
	switch {
	case err == nil:
		return nil
	case alone(err):
		return &appAborted{index: i, err: err}
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// pruneResponses deletes at most PruneRows expired responses, if any can
// have expired, and returns when the next prune is due: the earliest expiry
// left, read after the prune in the batch's own transaction. The committer
// is the only writer of porch_idem_responses, so between prunes it knows
// that time without asking (responsesDue, lowered by each save that
// commits). Without
// this a limiter-only server paid a DELETE on an empty table in every
// commit: 15% of its CPU at 16 connections.
//
// The due time it returns takes effect only if the batch commits: rolled
// back, the prune's rows are back, and the next batch prunes again.
func (s *Store) pruneResponses(ctx context.Context) (due int64, err error) {
	now := s.Now().UnixMilli()
	if s.opt.PruneRows <= 0 || now < s.responsesDue {
		return s.responsesDue, nil
	}
	res, err := s.stmts.pruneResponses.ExecContext(ctx, now, s.opt.PruneRows)
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune responses: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n >= int64(s.opt.PruneRows) {
		return now, nil // more may be expired: prune again next commit
	}
	if err := s.wconn.QueryRowContext(ctx, sqlResponsesDue, int64(math.MaxInt64)).Scan(&due); err != nil {
		return 0, fmt.Errorf("sqlite: prune responses: %w", err)
	}
	return due, nil
}

// applyOwner runs an idempotency owner's statements, then stores its
// response; they commit together or not at all, since a failure rolls
// back the owner's savepoint, or, in a bare pass, the batch (applyBare). A statement that fails on its own terms (a constraint, a bad query)
// is store.ErrWriteFailed; anything else (a full disk) is the store failing.
//
// The owner's statements share one budget (Options.ExecBudget), so
// that one owner holds the committer, and every write queued behind it, for
// at most that long however many statements it ran.
func (s *Store) applyOwner(ctx context.Context, o commit.Op) error {
	bctx, cancel := s.budget(ctx)
	defer cancel()
	for _, e := range o.Owner {
		if err := s.execApp(bctx, &e); err != nil {
			if ownersFault(err) {
				return fmt.Errorf("%w: %w", store.ErrWriteFailed, err)
			}
			return fmt.Errorf("sqlite: owner's write: %w", err)
		}
	}
	return s.upsertResponse(o.Response)
}

// ownersFault tells a statement that failed because of what it says (a
// constraint, a syntax error, a type mismatch) from one the database could
// not carry out (a full disk, an I/O error), which is not the owner's fault
// and may pass on a retry.
func ownersFault(err error) bool {
	if errors.Is(err, ErrExecBudget) {
		return true // it ran too long; another statement need not
	}
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

// execApp runs an application's statement on the writer, with everything
// but row reads and writes of the application's own tables refused (see
// authorize), and held to the limits on one step (see limits.go). A
// refusal names its reason, wrapped with ErrRefused.
//
// ctx is the statement's budget (see budget): when it ends the driver
// interrupts the statement, which SQLite undoes whole — only the statement,
// or the batch's whole transaction, which inSavepoint reports as errTxGone
// and writeBatch writes again without it. SQLite sees the interrupt only
// between steps, so a statement can finish past its budget: that is the
// budget's error too, since its caller must not be told both that it
// overran and that it is written. No half-written row can stay: any error,
// budget or not, rolls the caller's savepoint back with every statement of
// it (or, in a bare pass, the batch: applyBare).
func (s *Store) execApp(ctx context.Context, e *commit.Statement) (err error) {
	if err := checkAppArgs(e.Args); err != nil {
		return err
	}
	if err := s.holdToAppLimits(true); err != nil {
		return fmt.Errorf("sqlite: set limits: %w", err)
	}
	defer func() {
		if lerr := s.holdToAppLimits(false); lerr != nil && err == nil {
			err = fmt.Errorf("sqlite: set limits: %w", lerr)
		}
	}()
	s.appStatement, s.refusal = true, ""
	defer func() { s.appStatement = false }()
	_, err = s.wconn.ExecContext(ctx, e.Query, e.Args...)
	// Past the budget by the clock, not only by ctx.Err(): the timer that
	// ends ctx may not have run yet on a starved machine, and a statement
	// that finished late must fail whether or not it has.
	deadline, bounded := ctx.Deadline()
	late := ctx.Err() != nil || (bounded && !time.Now().Before(deadline))
	switch {
	case s.refusal != "":
		return fmt.Errorf("%w: %s: %w", ErrRefused, s.refusal, err)
	case late && err == nil:
		return fmt.Errorf("%w: it finished after the budget ended", ErrExecBudget)
	case late:
		return fmt.Errorf("%w: %w", ErrExecBudget, err)
	case err != nil:
		return tooBig(err)
	}
	return nil
}

// budget derives from ctx the context an application's statements run
// under in a commit: it ends after Options.ExecBudget, and the driver
// then interrupts the running statement (sqlite3_interrupt). Every write of
// the process waits on the committer, so without it one slow statement
// (6.4 s measured) stalled every limiter hit for as long.
func (s *Store) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	b := s.execBudget()
	if b < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b)
}

// execBudget is Options.ExecBudget resolved: negative is none.
func (s *Store) execBudget() time.Duration {
	if b := s.opt.ExecBudget; b != 0 {
		return b
	}
	return defaultExecBudget
}

// deferApp reports whether the batch's time for applications' statements
// has run out, so that the next owner's (or Exec's) statements wait for
// the next batch instead of running in this one; it records, otherwise,
// that one runs. Each owner has the whole budget, but a batch spends on
// owners at most the budget plus the last one's: without the batch's
// bound, twenty owners each just under the budget held every limiter hit
// of the batch for twenty budgets. The first application statement of a
// batch always runs, so the deferred ones, which lead the next batch, make
// progress.
func (s *Store) deferApp() bool {
	if s.appRan && !s.appDeadline.IsZero() && !time.Now().Before(s.appDeadline) {
		return true
	}
	s.appRan = true
	return false
}

// ErrRefused wraps an application's statement that the writer refused: it
// would have changed the schema, left an object behind on the committer's
// connection, written porch's or SQLite's own tables, or controlled the
// batch's transaction (the authorizer), or it bound or built a value over
// the limits an application's statement runs under (see Store.Exec). The
// owner fails alone, as store.ErrWriteFailed.
var ErrRefused = errors.New("sqlite: statement not allowed on the shared writer")

// sqliteRecursive is SQLITE_RECURSIVE, a recursive common table
// expression, which the driver does not export.
const sqliteRecursive = 33

// authorize is the writer connection's SQLite authorizer. While an
// application's statement is being prepared it allows only what an owner
// needs to write rows: SELECT, reads, recursive CTEs, functions, and
// INSERT, UPDATE and DELETE on the application's own tables. Everything
// else is refused, for one of three reasons:
//
//   - Transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE),
//     ATTACH, DETACH and PRAGMA would commit, undo or reconfigure the
//     batch's transaction, which holds other callers' writes.
//   - Every schema change (CREATE, DROP, ALTER of tables, indexes, views,
//     triggers and virtual tables, temporary or not), ANALYZE and REINDEX
//     outlive the statement: a TEMP TRIGGER stays on the committer's
//     connection and fires on every later caller's insert, a trigger on a
//     main table fires on every connection, and either can hang itself on
//     porch's tables. Owners write rows; migrations are the application's
//     job at startup, through DB(), not something to run inside other
//     callers' commit. An allow-list rather than a deny-list, so that an
//     action a newer SQLite adds is refused until someone looks at it.
//   - Writes to porch_* tables would forge or erase limiter counts and
//     stored responses behind the committer's bookkeeping; sqlite_* tables
//     are SQLite's own. load_extension and fts3_tokenizer would change what
//     the connection runs from then on.
//
// SQLite calls it on the committer's goroutine, while that goroutine
// prepares a statement (a trigger's body is compiled into it then too), so
// appStatement and refusal need no lock.
func (s *Store) authorize(action int, arg1, arg2, _ string) int {
	if !s.appStatement {
		return sqlite3.SQLITE_OK
	}
	switch action {
	case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqliteRecursive:
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE:
		if t := strings.ToLower(arg1); strings.HasPrefix(t, "porch_") || strings.HasPrefix(t, "sqlite_") {
			return s.refuse("a write to " + arg1 + ", which belongs to porch or SQLite")
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_FUNCTION:
		switch strings.ToLower(arg2) {
		case "load_extension", "fts3_tokenizer":
			return s.refuse(arg2 + "(), which changes the connection")
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT:
		return s.refuse("transaction control")
	case sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA:
		return s.refuse("ATTACH, DETACH or PRAGMA")
	}
	return s.refuse("a schema change (CREATE, DROP, ALTER, ANALYZE, REINDEX)")
}

// refuse records why the statement being prepared was refused, for
// execApp's error, and denies it.
func (s *Store) refuse(why string) int {
	if s.refusal == "" {
		s.refusal = why
	}
	return sqlite3.SQLITE_DENY
}

// errTxGone reports that a statement ended the batch's whole transaction.
var errTxGone = errors.New("sqlite: the statement rolled back the whole transaction")

// inTransaction reports whether the writer is still inside the batch's
// transaction: a statement with a ROLLBACK conflict clause, or a trigger's
// RAISE(ROLLBACK), ends it without any statement the authorizer sees.
func (s *Store) inTransaction() bool {
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
func (s *Store) inSavepoint(ctx context.Context, fn func() error) (ownErr, txErr error) {
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
