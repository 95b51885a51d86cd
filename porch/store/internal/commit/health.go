package commit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/store"
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

// Check is Store.Health: the last outcome when it is recent, else the
// outcome of a probe write. Callers arriving while a probe is in flight wait
// for that probe instead of queueing their own, so however often Health is
// polled, an idle store commits at most one probe per HealthMaxAge.
func (c *Committer) Check(ctx context.Context) error {
	c.mu.RLock()
	closed := c.closed
	c.mu.RUnlock()
	if closed {
		return store.ErrClosed
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
		ok, err := c.tryEnqueue(Op{Probe: true, Done: func(error) {
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
			return fmt.Errorf("%w: the commit queue is full and no commit finished in the last %s", store.ErrUnhealthy, HealthMaxAge)
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
		return fmt.Errorf("%w: no commit finished within %s", store.ErrUnhealthy, c.healthBudget)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *outcome) unhealthy() error {
	if o.err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", store.ErrUnhealthy, o.err)
}

// ProbeKey is the counter row a probe inserts and deletes again in one
// transaction. No limiter's key has this form (theirs start "rate:"), the
// row is never visible to a reader, and the transaction must really write:
// a transaction that changes nothing commits even on a read-only file or a
// full disk.
const ProbeKey = "porch:health"

// ProbeSQL is a probe's statements, which a Writer runs in the batch of an
// Op with Probe set. Both SQL drivers' tables take them as they are.
var ProbeSQL = [...]string{
	`INSERT INTO porch_rate_counters (key, window_start, window_ms, count, expires_at)
		VALUES ('` + ProbeKey + `', 0, 0, 0, 0) ON CONFLICT (key) DO NOTHING`,
	`DELETE FROM porch_rate_counters WHERE key = '` + ProbeKey + `'`,
	`INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
		VALUES ('` + ProbeKey + `', '', 0, '', '', 0, 0) ON CONFLICT (key) DO NOTHING`,
	`DELETE FROM porch_idem_responses WHERE key = '` + ProbeKey + `'`,
}

// Health check timing.
const (
	// HealthMaxAge is how old the committer's last outcome may be and still
	// answer Health. Package store's docs state both. A store under load commits far more often than this,
	// so polling Health then costs no write at all.
	HealthMaxAge = time.Second
	// HealthBudget is how long Health waits for its probe's commit. A store
	// that cannot commit within it is unhealthy: its requests are waiting
	// at least that long too.
	HealthBudget = time.Second
)
