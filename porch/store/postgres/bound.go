package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cancelGrace is how long the server has, once a commit's bound
// (Options.Timeout) has passed, to answer the cancel request porch sends
// it, before the connection is closed instead. A server that answers at
// all answers a cancel in milliseconds; one that does not is down or cut
// off, and the connection with it.
const cancelGrace = time.Second

// errLate is a commit that outlasted Options.Timeout. Its message says
// what a caller may rely on, and it does not wrap context.DeadlineExceeded:
// the server failed to answer in time, which is a store failure to log and
// count, not a request that ended (the middlewares' fail-closed answer
// tells the two apart by it).
var errLate = errors.New("no answer within Options.Timeout")

// cancelOnServer makes a context that ends during a statement on cfg's
// connections ask the server to cancel it (a cancel request on a
// connection of its own), instead of closing the connection, which is
// pgx's default. Closing is no cancel: a backend waiting for a
// synchronous standby to confirm its COMMIT does not notice its client
// has gone, and keeps waiting, holding the transaction's row locks, for
// as long as the standby stays away, so that every later batch touching
// those rows would wait behind it. Cancelled, it commits on the primary
// alone (with a WARNING) and lets them go, and the connection stays in
// use. If the server does not answer within cancelGrace, the connection
// is closed after all.
func cancelOnServer(cfg *pgx.ConnConfig) {
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
	}
}

// bounded is ctx with Options.Timeout's deadline, for one commit.
func (p *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.opt.Timeout)
}

// late returns err, or, if ctx's bound passed before it returned, errLate
// saying what happened: a COMMIT that answered after its bound (PostgreSQL
// committed it on the primary when it was cancelled while waiting for a
// synchronous standby, or the disk was that slow) is not a success either,
// since its callers were promised an answer within the bound and, at
// SurvivesPowerLoss, a commit the standby holds. what names the operation.
func (p *Store) late(ctx context.Context, what string, err error) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, errLate) {
		return err
	}
	if err == nil {
		return fmt.Errorf("postgres: %s: committed on the primary only after %s: %w (a synchronous standby did not confirm the commit, or the disk was slow); counts err high, a stored response is replayed to its retry",
			what, p.opt.Timeout, errLate)
	}
	// err's text, not err: it wraps the deadline (see errLate).
	return fmt.Errorf("postgres: %s: %w (%s: the server, a lock or a synchronous standby held it up; it may still commit, so counts err high): %s",
		what, errLate, p.opt.Timeout, err.Error())
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
