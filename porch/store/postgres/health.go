package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Health reports whether the store can commit; see sqlite.Store.Health,
// which answers the same way. The committer's probe goes through the
// committer's connections, the ones that count, in a batch's transaction
// after its hits (see countHits): it locks the probe row last, so two
// instances' batches still lock rows in one order.
//
// Under store.SurvivesProcessCrash that probe commits at the hits' level,
// which waits for no disk flush and no standby, so Health also commits a
// probe at the server's own level, the level of every stored response, on
// a connection of its own and off the committer: a synchronous standby
// that does not confirm it then makes Health fail, saying so, while hits
// go on being counted. Like the committer's, it runs at most once a
// second however often Health is polled, and is bounded by a second.
func (p *Store) Health(ctx context.Context) error {
	if err := p.c.Check(ctx); err != nil {
		return err
	}
	if p.opt.Durability != store.SurvivesProcessCrash {
		return nil // the committer's probe was at the server's level
	}
	return p.durable.check(ctx)
}

// durableProbe is Health's probe at the server's level (see Health): its
// last outcome and the one probe that may be in flight. Safe for
// concurrent use.
type durableProbe struct {
	p *Store

	mu      sync.Mutex    // protects the fields below
	ran     bool          // err and at hold an outcome
	err     error         // the last probe's
	at      time.Duration // when it ended, on p's monotonic clock
	probing chan struct{} // closed when the probe in flight ends; nil when none is
}

// check returns the last outcome while it is recent, else probes, or
// waits for the probe another caller started. Whoever probes does so on
// its own goroutine and within commit.HealthBudget, whatever ctx does,
// so that an impatient caller cannot leave an outcome unrecorded.
func (d *durableProbe) check(ctx context.Context) error {
	d.mu.Lock()
	if d.ran && d.p.opt.Clock.Monotonic()-d.at < commit.HealthMaxAge {
		err := d.err
		d.mu.Unlock()
		return err
	}
	wait := d.probing
	if wait == nil {
		wait = make(chan struct{})
		d.probing = wait
		d.mu.Unlock()
		err := d.probe(context.WithoutCancel(ctx))
		d.mu.Lock()
		d.ran, d.err, d.at, d.probing = true, err, d.p.opt.Clock.Monotonic(), nil
		d.mu.Unlock()
		close(wait)
		return err
	}
	d.mu.Unlock()
	select {
	case <-wait:
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probe writes and deletes a stored response's row in one transaction at
// the server's synchronous_commit, on the committer's pool (a connection
// the committer does not need: it uses one at a time), within
// commit.HealthBudget.
func (d *durableProbe) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, commit.HealthBudget)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, d.p.writer, readCommitted, func(tx pgx.Tx) error {
		for _, q := range pgDurableProbe {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		detail := "it committed only after it"
		if err != nil {
			// Its text, not err: it wraps the deadline, and this is the
			// store's failure, not the caller's (see errLate).
			detail = err.Error()
		}
		return fmt.Errorf("%w: a commit at the server's synchronous_commit, as a stored response's, did not finish within %s (the server, the network or a synchronous standby held it up): %s",
			store.ErrUnhealthy, commit.HealthBudget, detail)
	case err != nil:
		return fmt.Errorf("%w: a commit at the server's synchronous_commit, as a stored response's: %w", store.ErrUnhealthy, err)
	}
	return nil
}

// pgDurableProbe is durableProbe's write: a row of its own, apart from
// the committer's probe row (commit.ProbeKey), so that the two never wait
// for each other's locks.
var pgDurableProbe = [...]string{
	`INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at)
		VALUES ('` + durableProbeKey + `', '', 0, '', '', 0, 0) ON CONFLICT (key) DO NOTHING`,
	`DELETE FROM porch_idem_responses WHERE key = '` + durableProbeKey + `'`,
}

// durableProbeKey is durableProbe's row's key: no idempotency key's
// lookup key has this form (theirs start "idem:").
const durableProbeKey = commit.ProbeKey + ":durable"
