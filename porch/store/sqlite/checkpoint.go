//go:build cgo

package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// checkpointEvery is how many commits pass between two WAL checkpoints.
const checkpointEvery = 64

// syncWithin bounds how long a count committed without an fsync (see
// batchSynchronous) waits for a checkpoint, which fsyncs the WAL before it
// copies it back: what a power loss can take under
// store.SurvivesProcessCrash is the counts of about this long, or of
// checkpointEvery commits if they come sooner. It is PostgreSQL's
// wal_writer_delay, which bounds the same loss there at three times it.
const syncWithin = 200 * time.Millisecond

// checkpointer copies the WAL back into the database file on a connection of
// its own. SQLite otherwise does all that copying inside whichever commit
// crosses the WAL's size threshold, stalling the committer, and with it every
// caller of that batch. A PASSIVE checkpoint never blocks the writer, so most
// of the copying moves off the request path; the writer's own checkpoint then
// finds little left and restarts the WAL (see Store.init).
type checkpointer struct {
	conn *sql.Conn
	log  *slog.Logger  // Options.Logger; may be nil
	kick chan struct{} // buffered 1: a kick while one runs coalesces
	soon chan struct{} // buffered 1: a checkpoint is wanted within syncWithin
	done chan struct{}
	once sync.Once // Close may be called more than once
}

func newCheckpointer(conn *sql.Conn, log *slog.Logger) *checkpointer {
	c := &checkpointer{conn: conn, log: log, kick: make(chan struct{}, 1), soon: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c
}

// poke asks for a checkpoint without waiting for it.
func (c *checkpointer) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// syncSoon asks for a checkpoint within syncWithin, without waiting for
// it: a commit has left frames in the WAL that no fsync covers.
func (c *checkpointer) syncSoon() {
	select {
	case c.soon <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	var due <-chan time.Time // set while a syncSoon waits for its checkpoint
	for {
		select {
		case _, ok := <-c.kick:
			if !ok {
				return
			}
		case <-c.soon:
			if due == nil {
				due = time.After(syncWithin)
			}
			continue
		case <-due:
		}
		// Any checkpoint covers every commit before it: a syncSoon
		// received before this one needs no other.
		due = nil
		if _, err := c.conn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
			// The WAL only grows until the next checkpoint succeeds; the
			// data is safe either way.
			commit.Log(c.log).Warn("sqlite: wal checkpoint failed", "err", err)
		}
	}
}

// close runs a final checkpoint that also truncates the WAL, then stops.
// Only the committer pokes, and it has stopped before close is called.
func (c *checkpointer) close() {
	c.once.Do(func() {
		close(c.kick)
		<-c.done
		c.conn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)") //nolint:errcheck // best effort at shutdown
		c.conn.Close()
	})
}
