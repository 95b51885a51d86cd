package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnhealthy is returned by Store.Health, wrapping the reason, while the
// store cannot commit: its last commit failed, or none finished within
// HealthBudget.
var ErrUnhealthy = errors.New("store: cannot commit")

// Health check timing.
const (
	// HealthMaxAge is how old the committer's last outcome may be and still
	// answer Health. A store under load commits far more often than this,
	// so polling Health then costs no write at all.
	HealthMaxAge = time.Second
	// HealthBudget is how long Health waits for its probe's commit. A store
	// that cannot commit within it is unhealthy: its requests are waiting
	// at least that long too.
	HealthBudget = time.Second
)

// outcome is one batch's result, at a monotonic reading of the store's
// clock.
type outcome struct {
	err error
	at  time.Duration
}

// health is the committer's memory of its last outcome and the one probe
// that may be in flight.
type health struct {
	mu      sync.Mutex    // protects the fields below
	last    *outcome      // nil until the first batch ends
	probing chan struct{} // closed when the probe in flight is answered; nil when none is
}

// record notes a batch's outcome. The committer calls it before it runs the
// batch's callbacks, so a caller told of a failure finds Health reporting it.
func (h *health) record(err error, at time.Duration) {
	h.mu.Lock()
	h.last = &outcome{err: err, at: at}
	h.mu.Unlock()
}

// check is Store.Health: the last outcome when it is recent, else the
// outcome of a probe write. Callers arriving while a probe is in flight wait
// for that probe instead of queueing their own, so however often Health is
// polled, an idle store commits at most one probe per HealthMaxAge.
func (c *committer) check(ctx context.Context) error {
	c.mu.RLock()
	closed := c.closed
	c.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	now := c.clock.Monotonic()
	c.health.mu.Lock()
	if o := c.health.last; o != nil && now-o.at < HealthMaxAge {
		c.health.mu.Unlock()
		return o.unhealthy()
	}
	wait := c.health.probing
	if wait == nil {
		probing := make(chan struct{})
		ok, err := c.tryEnqueue(op{probe: true, done: func(error) {
			c.health.mu.Lock()
			c.health.probing = nil
			c.health.mu.Unlock()
			close(probing)
		}})
		if err != nil {
			c.health.mu.Unlock()
			return err
		}
		if !ok {
			// The queue is full and yet no batch has ended for a while:
			// the committer is stuck, and a probe would only wait too.
			c.health.mu.Unlock()
			return fmt.Errorf("%w: the commit queue is full and no commit finished in the last %s", ErrUnhealthy, HealthMaxAge)
		}
		c.health.probing, wait = probing, probing
	}
	c.health.mu.Unlock()

	t := time.NewTimer(c.healthBudget)
	defer t.Stop()
	select {
	case <-wait:
		c.health.mu.Lock()
		o := c.health.last // the probe's batch, or a later one: either is news
		c.health.mu.Unlock()
		return o.unhealthy()
	case <-t.C:
		return fmt.Errorf("%w: no commit finished within %s", ErrUnhealthy, c.healthBudget)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *outcome) unhealthy() error {
	if o.err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnhealthy, o.err)
}

// probeKey is the counter row a probe inserts and deletes again in one
// transaction. No limiter's key has this form (theirs start "rate:"), the
// row is never visible to a reader, and the transaction must really write:
// a transaction that changes nothing commits even on a read-only file or a
// full disk.
const probeKey = "porch:health"

const (
	sqlProbeInsert = `INSERT INTO porch_rate_counters (key, window_start, window_ms, count, expires_at)
		VALUES ('` + probeKey + `', 0, 0, 0, 0) ON CONFLICT (key) DO NOTHING`
	sqlProbeDelete = `DELETE FROM porch_rate_counters WHERE key = '` + probeKey + `'`
)

// Health reports whether the store can commit: nil while it can, else an
// error wrapping ErrUnhealthy and the reason (or ErrClosed, or ctx.Err()).
// It answers from the last commit's outcome when that is under
// HealthMaxAge old; an idle store commits one small probe instead, shared
// by every caller meanwhile and waited for at most HealthBudget. It is cheap
// enough for an unlimited health endpoint.
func (s *SQLite) Health(ctx context.Context) error { return s.c.check(ctx) }

// writeProbe runs on the committer, inside a batch's transaction.
func (s *SQLite) writeProbe(ctx context.Context) error {
	for _, q := range []string{sqlProbeInsert, sqlProbeDelete} {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("store: health probe: %w", err)
		}
	}
	return nil
}

// Health reports whether the store can commit; see [SQLite.Health]. The
// probe goes through the committer's connections, the ones that count.
func (p *Postgres) Health(ctx context.Context) error { return p.c.check(ctx) }

// pgWriteProbe runs inside a batch's transaction, after its hits: it locks
// the probe row last, so two instances' batches still lock rows in one
// order.
func pgWriteProbe(ctx context.Context, tx pgx.Tx) error {
	for _, q := range []string{sqlProbeInsert, sqlProbeDelete} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("store: health probe: %w", err)
		}
	}
	return nil
}
