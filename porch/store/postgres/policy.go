package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Statements of the policy claim. Every instance's claim runs under one
// transaction-scoped advisory lock, so that reading porch_rate_policies and
// taking a name's lock are one step. Each running limiter holds a shared
// session lock on its name; changing the row needs that lock exclusively,
// which PostgreSQL grants only while no instance holds it shared, that is,
// while no instance still counts under the old policy. The server drops a
// session's locks when the session ends, so a crashed instance never blocks
// a deploy.
const (
	pgLockPolicies = `SELECT pg_advisory_xact_lock(hashtextextended('porch_rate_policies:' || 'porch_rate_policies'::regclass::oid::text, 0))`
	pgReadPolicy   = `SELECT quota, window_ms, algorithm, burst FROM porch_rate_policies WHERE name = $1`
	pgWritePolicy  = `INSERT INTO porch_rate_policies (name, quota, window_ms, algorithm, burst, updated_at)
		VALUES ($1, $2, $3, $4, $5, ` + pgNowMS + `)
		ON CONFLICT (name) DO UPDATE SET quota = excluded.quota, window_ms = excluded.window_ms,
			algorithm = excluded.algorithm, burst = excluded.burst, updated_at = excluded.updated_at`
	// A name's lock is keyed by the table's oid too: advisory locks are
	// per database, and two schemas' porch tables are two deployments.
	pgPolicyLockKey   = `hashtextextended('porch_rate_policy:' || 'porch_rate_policies'::regclass::oid::text || ':' || $1::text, 0)`
	pgHoldPolicy      = `SELECT pg_advisory_lock_shared(` + pgPolicyLockKey + `)`
	pgTryOwnPolicy    = `SELECT pg_try_advisory_lock(` + pgPolicyLockKey + `)`
	pgDisownPolicy    = `SELECT pg_advisory_unlock(` + pgPolicyLockKey + `)`
	pgReleasePolicy   = `SELECT pg_advisory_unlock_shared(` + pgPolicyLockKey + `)`
	pgPolicyClaimTime = 10 * time.Second
)

// ClaimPolicy records that a limiter counts under p until release is called
// (Limiter.Close does), across every instance sharing the database. It
// fails with store.ErrPolicyConflict while a limiter of the same name and
// another policy counts, in this process or in a running instance. When
// every instance of the old policy has stopped, the first to start with a
// new one records it: that is a deploy that changes the policy, and it is
// logged.
//
// The claim is a shared advisory lock held on a connection of the
// committer's pool for as long as a limiter holds it. If that connection is
// lost (a database restart), the lock goes with it and a later instance
// with another policy is no longer refused.
func (p *Store) ClaimPolicy(ctx context.Context, pol driver.Policy) (release func(), err error) {
	if err := supportedAlgorithm(pol.Algorithm); err != nil {
		return nil, err
	}
	p.policyMu.Lock()
	defer p.policyMu.Unlock()
	first, local, err := p.claims.Claim(pol)
	if err != nil || !first {
		return local, err
	}
	if err := p.claimShared(ctx, pol); err != nil {
		local()
		return nil, err
	}
	p.claims.SetRelease(pol.Name, func() { p.releaseShared(pol.Name) })
	return local, nil
}

// claimShared takes pol.Name's shared lock on the policy connection,
// recording pol when the name is new, or changing it when no instance holds
// the name. p.policyMu is held.
func (p *Store) claimShared(ctx context.Context, pol driver.Policy) error {
	ctx, cancel := context.WithTimeout(ctx, pgPolicyClaimTime)
	defer cancel()
	if p.policyConn == nil {
		conn, err := p.writer.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("postgres: claim rate policy: %w", err)
		}
		p.policyConn = conn
	}
	var (
		old          driver.Policy
		found, owned bool
	)
	err := pgx.BeginFunc(ctx, p.policyConn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgLockPolicies); err != nil {
			return err
		}
		var quota, windowMS, burst int64
		var algorithm string
		err := tx.QueryRow(ctx, pgReadPolicy, pol.Name).Scan(&quota, &windowMS, &algorithm, &burst)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			found = true
			old = driver.Policy{Name: pol.Name, Limit: quota, Window: time.Duration(windowMS) * time.Millisecond,
				Algorithm: algorithm, Burst: burst}
		}
		if found && !old.Equal(pol) {
			if err := tx.QueryRow(ctx, pgTryOwnPolicy, pol.Name).Scan(&owned); err != nil {
				return err
			}
			if !owned {
				return fmt.Errorf("%w: running instances count %s, this one %s; stop them all before changing it, or give this limiter another Name",
					store.ErrPolicyConflict, old, pol)
			}
		}
		// An unchanged policy is not written again: a transaction that
		// writes nothing commits without waiting for a synchronous
		// standby, so an instance restarted while one is down starts.
		if !found || !old.Equal(pol) {
			written := pol.Algorithm
			if written == "" {
				written = "fixed"
			}
			if _, err := tx.Exec(ctx, pgWritePolicy, pol.Name, pol.Limit, pol.Window.Milliseconds(), written, pol.Burst); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, pgHoldPolicy, pol.Name)
		return err
	})
	if owned {
		// Exclusive only for the change: the shared lock is what this
		// instance holds from now on. Session locks outlive the
		// transaction, so this is its own statement.
		if _, uerr := p.policyConn.Exec(ctx, pgDisownPolicy, pol.Name); uerr != nil {
			p.dropPolicyConn() // closing the session is the unlock of last resort
			if err == nil {
				err = uerr
			}
		}
	}
	if errors.Is(err, store.ErrPolicyConflict) {
		return err
	}
	if err != nil {
		if p.policyConn != nil && p.policyConn.Conn().IsClosed() {
			p.dropPolicyConn()
		}
		return fmt.Errorf("postgres: claim rate policy %s: %w", pol, err)
	}
	if found && !old.Equal(pol) {
		commit.Log(p.opt.Logger).Warn("postgres: rate policy changed; open windows keep their counts and close at their old end or one new window from now, whichever is sooner",
			"was", old.String(), "now", pol.String())
	}
	return nil
}

// releaseShared gives name's shared lock back.
func (p *Store) releaseShared(name string) {
	p.policyMu.Lock()
	defer p.policyMu.Unlock()
	if p.policyConn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgPolicyClaimTime)
	defer cancel()
	if _, err := p.policyConn.Exec(ctx, pgReleasePolicy, name); err != nil {
		p.dropPolicyConn() // closing the session releases every lock it held
	}
}

// dropPolicyConn closes the policy connection, and with it every policy
// lock of this instance. p.policyMu is held.
func (p *Store) dropPolicyConn() {
	if p.policyConn != nil {
		discard(p.policyConn)
		p.policyConn = nil
	}
}

// closePolicies ends every claim at Close: the pool cannot close while the
// policy connection is held.
//
// The locks are released before the connection goes: a closed connection
// drops them only once its backend has exited, after Close has returned,
// and an instance started just after with another policy was then refused
// (a deploy that changes a policy, racing the old instance's exit).
func (p *Store) closePolicies() {
	p.policyMu.Lock()
	defer p.policyMu.Unlock()
	if p.policyConn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), pgPolicyClaimTime)
		p.policyConn.Exec(ctx, `SELECT pg_advisory_unlock_all()`) //nolint:errcheck // closing the session releases them anyway
		cancel()
	}
	p.dropPolicyConn()
}
