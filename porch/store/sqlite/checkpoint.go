package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// checkpointEvery is how many commits pass between two WAL checkpoints.
const checkpointEvery = 64

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
	done chan struct{}
	once sync.Once // Close may be called more than once
}

func newCheckpointer(conn *sql.Conn, log *slog.Logger) *checkpointer {
	c := &checkpointer{conn: conn, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
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

func (c *checkpointer) run() {
	defer close(c.done)
	for range c.kick {
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
