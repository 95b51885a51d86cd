//go:build cgo

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/mattn/go-sqlite3"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// The hit journal: how SQLite keeps counters durable by appending only.
//
// The limiter's actors hold every live count in memory and decide alone;
// the store's rows exist only to rebuild them after a restart. So a counter
// write is not an upsert into porch_rate_counters, whose random TEXT keys
// dirty a page or two each all over its B-tree, but an append to
// porch_rate_journal, a rowid table written at its right edge: a key's
// newest row (highest seq) is its durable bound.
//
// The journal is kept small by cleaning, as a log-structured store cleans
// its log: while it is large, each commit also takes a bounded slice from
// its head, drops the rows a newer row of their key supersedes or whose
// window has closed, and moves the rest (each the newest of a live key) to
// the tail. All of it is appends and a range delete of the head, in the
// commit's own transaction, so it shares the commit's fsync and a crash
// leaves the journal either before or after it. The committer knows which
// row is each key's newest without an index: it is the only writer.
//
// porch_rate_counters holds the counts only between runs: Close folds the
// journal into it (the newest row of each live key) and empties the
// journal, so a clean shutdown leaves exact counts there; open moves its
// rows back into the journal, so that while the store runs a key lives in
// exactly one place. After kill -9 the journal is read as it was left.
// The view porch_rate_current reads both, for an operator or a test.

const (
	// journalMinRows is the size below which the journal is not cleaned.
	journalMinRows = 4096
	// journalSliceMax caps the rows one commit cleans.
	journalSliceMax = 1024
)

// journal is the committer's bookkeeping of porch_rate_journal. Only the
// committer goroutine touches it (and open and Close, while no committer
// runs). A transaction's changes are staged in the tx fields and in stage,
// and take effect in commit: a rolled-back batch must not leave latest
// naming a row that does not exist, or the cleaner would drop the row that
// does.
type journal struct {
	latest    map[string]int64 // key → seq of its newest row, as committed
	peak      int              // len(latest) at its largest since it was last rebuilt
	next      int64            // the seq the next row gets
	head      int64            // no row has a lower seq
	rows      int              // rows in the journal
	cleanAt   int              // each commit cleans a slice while rows ≥ cleanAt
	minRows   int              // journalMinRows; a test may lower it before the first write
	sweeping  bool             // the last slice cleaned was nearly all garbage: take a full one
	recheckAt int64            // while cleaning waits for the journal to double, clean anyway from this time (Unix ms) on; 0: no such time

	stage                    map[string]int64 // this transaction's changes to latest; -1 removes
	txNext, txHead           int64
	txRows, txCleanAt, added int

	headSlice, dropHead *sql.Stmt // on the writer
	slice               []journalRow
	appender            journalAppender
}

// journalAppender appends rows through the driver's own prepared statement
// on the writer's connection, every row queued since the last flush in one
// Raw call, as responseRows does for responses: through database/sql each
// row paid its argument conversion and its connection locking, a sixth of
// the instructions of a row's append. The statement, its arguments and the
// queue are touched only by the committer, inside Raw, so that database/sql
// still owns the connection.
type journalAppender struct {
	stmt *sqlite3.SQLiteStmt  // sqlJournalAppend, prepared at open; nil until then
	args [7]driver.NamedValue // its arguments, reused row after row
	rows []journalRow         // queued by append, written by flush
	fn   func(driverConn any) error
}

type journalRow struct {
	seq                                 int64
	key                                 string
	start, window, count, prev, expires int64
}

// newest is the seq of key's newest row as this transaction sees it, 0 if
// the key has none.
func (j *journal) newest(key string) int64 {
	if seq, ok := j.stage[key]; ok {
		return max(seq, 0)
	}
	return j.latest[key]
}

// begin starts a transaction's staging.
func (j *journal) begin() {
	clear(j.stage)
	j.txNext, j.txHead, j.txRows, j.txCleanAt, j.added = j.next, j.head, j.rows, j.cleanAt, 0
}

// commit makes the staged changes the journal's: the transaction committed.
func (j *journal) commit() {
	for key, seq := range j.stage {
		if seq < 0 {
			delete(j.latest, key)
		} else {
			j.latest[key] = seq
		}
	}
	clear(j.stage)
	j.next, j.head, j.rows, j.cleanAt = j.txNext, j.txHead, j.txRows, j.txCleanAt
	j.peak = max(j.peak, len(j.latest))
	if j.peak > 1024 && len(j.latest) < j.peak/4 {
		// A Go map keeps its peak's memory: copy into a fresh one.
		fresh := make(map[string]int64, len(j.latest))
		for key, seq := range j.latest {
			fresh[key] = seq
		}
		j.latest, j.peak = fresh, len(fresh)
	}
}

// close finalizes the statements, on the writer's connection w (nil if
// open failed before it had one).
func (j *journal) close(w *sql.Conn) {
	for _, st := range []*sql.Stmt{j.headSlice, j.dropHead} {
		if st != nil {
			st.Close()
		}
	}
	if a := &j.appender; a.stmt != nil && w != nil {
		w.Raw(func(any) error { return a.stmt.Close() }) //nolint:errcheck // closing anyway
		a.stmt = nil
	}
}

// openJournal prepares the journal's statements on the writer, moves the
// counters a clean shutdown folded back into the journal, and reads which
// row is each key's newest. It runs before the committer starts.
func (s *Store) openJournal(ctx context.Context) error {
	j := &s.jr
	j.latest, j.stage = make(map[string]int64), make(map[string]int64)
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&j.headSlice, sqlJournalHead},
		{&j.dropHead, sqlJournalDropHead},
	} {
		var err error
		if *p.dst, err = s.wconn.PrepareContext(ctx, p.sql); err != nil {
			return fmt.Errorf("sqlite: prepare: %w", err)
		}
	}
	if err := s.wconn.Raw(j.appender.prepare); err != nil {
		return fmt.Errorf("sqlite: prepare: %w", err)
	}
	if err := s.inWriterTx(ctx, sqlJournalUnfold, sqlCountersEmpty); err != nil {
		return fmt.Errorf("sqlite: unfold counters: %w", err)
	}
	rows, err := s.wconn.QueryContext(ctx, sqlJournalNewest)
	if err != nil {
		return fmt.Errorf("sqlite: read journal: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			return fmt.Errorf("sqlite: read journal: %w", err)
		}
		j.latest[key] = seq
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: read journal: %w", err)
	}
	var lo, hi sql.NullInt64
	if err := s.wconn.QueryRowContext(ctx, sqlJournalExtent).Scan(&j.rows, &lo, &hi); err != nil {
		return fmt.Errorf("sqlite: read journal: %w", err)
	}
	j.minRows = journalMinRows
	j.head, j.next, j.cleanAt = lo.Int64, hi.Int64+1, j.minRows
	return nil
}

// inWriterTx runs stmts in one transaction on the writer.
func (s *Store) inWriterTx(ctx context.Context, stmts ...string) (err error) {
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.wconn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // already failing
		}
	}()
	for _, q := range stmts {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	_, err = s.wconn.ExecContext(ctx, "COMMIT")
	return err
}

// appendCounters journals the counters of batch[i:j], every one a Counter
// op, each as its key's newest bound, in one Raw call; a counter a newer
// write of its key in the batch supersedes is skipped. One prepared INSERT
// per row: a multi-row INSERT of 16 rows measured the same (the cost per
// row is SQLite's, not the cgo crossing).
func (s *Store) appendCounters(batch []commit.Op, i, j int) error {
	for k := i; k < j; k++ {
		c := batch[k].Counter
		if batch[k].Dropped || s.seen[c.Key] != k {
			continue // a newer write of this key is in the batch
		}
		s.jr.append(journalRow{key: c.Key, start: c.Start.UnixMilli(), window: c.Window.Milliseconds(),
			count: c.Count, prev: c.Prev, expires: c.End().UnixMilli()})
		s.jr.added++
	}
	if err := s.jr.flush(s.wconn); err != nil {
		return fmt.Errorf("sqlite: save counter: %w", err)
	}
	return nil
}

// counterRun returns the end of the run of Counter ops that starts at
// batch[i], or i if there is none.
func counterRun(batch []commit.Op, i int) int {
	j := i
	for j < len(batch) && batch[j].Counter != nil {
		j++
	}
	return j
}

// append queues r as the next row, to be written by flush in this
// transaction, and stages it as its key's newest. A flush that fails
// fails the batch, whose rollback drops the staging with it.
func (j *journal) append(r journalRow) {
	r.seq = j.txNext
	j.appender.rows = append(j.appender.rows, r)
	j.stage[r.key] = r.seq
	j.txNext++
	j.txRows++
}

// flush writes the queued rows on the writer w.
func (j *journal) flush(w *sql.Conn) error {
	a := &j.appender
	if len(a.rows) == 0 {
		return nil
	}
	err := w.Raw(a.fn)
	a.rows = a.rows[:0]
	for i := range a.args {
		a.args[i].Value = nil
	}
	return err
}

// prepare prepares the append on the writer's driver connection dc.
func (a *journalAppender) prepare(dc any) error {
	c, ok := dc.(*sqlite3.SQLiteConn)
	if !ok {
		return fmt.Errorf("unexpected driver connection %T", dc)
	}
	st, err := c.Prepare(sqlJournalAppend)
	if err != nil {
		return err
	}
	a.stmt = st.(*sqlite3.SQLiteStmt)
	for i := range a.args {
		a.args[i].Ordinal = i + 1
	}
	a.fn = func(any) error { return a.write() }
	return nil
}

// write runs the statement once per queued row, inside Raw.
func (a *journalAppender) write() error {
	for i := range a.rows {
		r := &a.rows[i]
		x := &a.args
		x[0].Value, x[1].Value, x[2].Value, x[3].Value = r.seq, r.key, r.start, r.window
		x[4].Value, x[5].Value, x[6].Value = r.count, r.prev, r.expires
		if _, err := a.stmt.ExecContext(context.Background(), x[:]); err != nil {
			return err
		}
	}
	return nil
}

// cleanJournal cleans one slice of the journal's head, if it is due: at
// most twice the rows this commit appended (plus a little), so that it
// keeps pace with the appends. A slice that is mostly live (a growing set
// of keys) is moved at a cost, so cleaning then waits until the journal has
// doubled; one that is mostly garbage keeps it going with every commit.
//
// After a slice that was nearly all garbage, the next may run to
// journalSliceMax whatever this commit appended: dropping dead rows is a
// read and one range delete, no appends. Otherwise a burst of keys that
// then expired (a million clients seen once) would be swept at 64 rows per
// commit of the trickle that follows, and its rows and their entries in
// latest would outlive their windows by hours.
func (s *Store) cleanJournal(ctx context.Context) error {
	j := &s.jr
	now := s.Now().UnixMilli()
	if j.txRows < j.txCleanAt && (j.recheckAt == 0 || now < j.recheckAt) {
		return nil
	}
	n := min(2*j.added+64, journalSliceMax)
	if j.sweeping {
		n = journalSliceMax
	}
	if err := j.readHead(ctx, n); err != nil {
		return fmt.Errorf("sqlite: clean journal: %w", err)
	}
	if len(j.slice) == 0 {
		return nil
	}
	kept, firstExpiry := 0, int64(0)
	for i := range j.slice {
		r := &j.slice[i]
		switch {
		case j.newest(r.key) != r.seq: // superseded
		case r.expires <= now:
			j.stage[r.key] = -1
		default:
			j.append(*r)
			if kept == 0 || r.expires < firstExpiry {
				firstExpiry = r.expires
			}
			kept++
		}
	}
	if err := j.flush(s.wconn); err != nil {
		return fmt.Errorf("sqlite: clean journal: %w", err)
	}
	last := j.slice[len(j.slice)-1].seq
	if _, err := j.dropHead.ExecContext(ctx, j.txHead, last); err != nil {
		return fmt.Errorf("sqlite: clean journal: %w", err)
	}
	j.txHead = last + 1
	j.txRows -= len(j.slice)
	// A hint for the next commit's slice, not bookkeeping: if this
	// transaction rolls back, a wrong guess costs one slice's size.
	j.sweeping = 8*kept <= len(j.slice)
	if 2*kept > len(j.slice) {
		// Mostly live: wait for the journal to double, or for the first
		// of these windows to close, whichever comes first. Without the
		// second, a journal that stops growing (a burst of clients, then
		// quiet) would keep its dead rows, and latest their keys, for good.
		j.txCleanAt = max(j.minRows, 2*j.txRows)
		j.recheckAt = firstExpiry
	} else {
		j.txCleanAt = j.minRows
		j.recheckAt = 0
	}
	return nil
}

// readHead reads up to n rows from the journal's head into j.slice.
func (j *journal) readHead(ctx context.Context, n int) error {
	j.slice = j.slice[:0]
	rows, err := j.headSlice.QueryContext(ctx, j.txHead, n)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r journalRow
		if err := rows.Scan(&r.seq, &r.key, &r.start, &r.window, &r.count, &r.prev, &r.expires); err != nil {
			return err
		}
		j.slice = append(j.slice, r)
	}
	return rows.Err()
}

// foldJournal writes the newest row of every live key into
// porch_rate_counters and empties the journal, in one transaction: a clean
// shutdown leaves exact counts in the table. It runs after the committer
// has stopped.
func (s *Store) foldJournal(ctx context.Context) (err error) {
	// A clean shutdown's counts wait for the disk, whatever the level.
	if err := s.setSynchronous(ctx, synchronousFull); err != nil {
		return fmt.Errorf("sqlite: fold journal: %w", err)
	}
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: fold journal: %w", err)
	}
	defer func() {
		if err != nil {
			s.wconn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // already failing
		}
	}()
	if _, err := s.wconn.ExecContext(ctx, sqlJournalFold, s.Now().UnixMilli()); err != nil {
		return fmt.Errorf("sqlite: fold journal: %w", err)
	}
	if _, err := s.wconn.ExecContext(ctx, sqlJournalEmpty); err != nil {
		return fmt.Errorf("sqlite: fold journal: %w", err)
	}
	if _, err := s.wconn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("sqlite: fold journal: %w", err)
	}
	clear(s.jr.latest)
	s.jr.rows, s.jr.head = 0, s.jr.next
	return nil
}

// The journal's statements. Rows are appended with the seq the committer
// assigns, always above every seq present, so an append writes the
// rowid B-tree's right edge. The bare columns beside max(seq) are SQLite's:
// they come from the row holding the maximum.
const (
	sqlJournalAppend = `INSERT INTO porch_rate_journal (seq, key, window_start, window_ms, count, prev, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlJournalHead = `SELECT seq, key, window_start, window_ms, count, prev, expires_at
		FROM porch_rate_journal WHERE seq >= ? ORDER BY seq LIMIT ?`
	sqlJournalDropHead = `DELETE FROM porch_rate_journal WHERE seq >= ? AND seq <= ?`
	sqlJournalNewest   = `SELECT key, max(seq) FROM porch_rate_journal GROUP BY key`
	sqlJournalExtent   = `SELECT count(*), min(seq), max(seq) FROM porch_rate_journal`
	sqlJournalEmpty    = `DELETE FROM porch_rate_journal`
	// A key with rows in the journal keeps them: they are newer than the
	// table's (a crash during the last run).
	sqlJournalUnfold = `INSERT INTO porch_rate_journal (key, window_start, window_ms, count, prev, expires_at)
		SELECT key, window_start, window_ms, count, prev, expires_at FROM porch_rate_counters c
		WHERE key <> '` + commit.ProbeKey + `'
			AND NOT EXISTS (SELECT 1 FROM porch_rate_journal j WHERE j.key = c.key)`
	sqlCountersEmpty = `DELETE FROM porch_rate_counters`
	sqlJournalFold   = `INSERT INTO porch_rate_counters (key, window_start, window_ms, count, prev, expires_at)
		SELECT key, window_start, window_ms, count, prev, expires_at FROM
			(SELECT key, window_start, window_ms, count, prev, expires_at, max(seq) FROM porch_rate_journal GROUP BY key)
		WHERE expires_at > ?
		ON CONFLICT (key) DO UPDATE SET
			window_start = excluded.window_start,
			window_ms    = excluded.window_ms,
			count        = excluded.count,
			prev         = excluded.prev,
			expires_at   = excluded.expires_at`
)
