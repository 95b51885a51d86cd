package rate

import (
	"context"
	"fmt"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/rate/internal/count"
)

// Allow counts one request by principal (an API key, a user id) outside an
// HTTP handler, and returns the verdict once the new count is durable. It
// shares its counter with requests for which Options.KeyFunc returns the same
// principal, and like theirs the count survives a restart. It fails with
// ErrNoPrincipal for "", with porch.ErrSaturated when the key's mailbox is
// full, with the store's error when the write failed, and with ctx.Err().
// In every failure the Verdict is zero and the caller must not serve the
// request.
func (l *Limiter) Allow(ctx context.Context, principal string) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	return l.allow(ctx, l.principalKey(principal), 1)
}

// AllowN counts one request of weight n by principal, as Allow counts a
// request of weight 1: it is allowed only if its window's count plus n is
// within the limit, and then the count grows by n, durably, before AllowN
// returns. A refused request changes nothing.
//
// It fails, without counting, with ErrNoPrincipal for "", ErrWeight for
// n < 1 and ErrOverLimit for n above the limit; and otherwise as Allow
// does. In every failure the Verdict is zero and the caller must not serve
// the request.
func (l *Limiter) AllowN(ctx context.Context, principal string, n int) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	if err := l.checkWeight(n); err != nil {
		return Verdict{}, err
	}
	return l.allow(ctx, l.principalKey(principal), int64(n))
}

// checkWeight reports why a request of weight n cannot be counted, if it
// cannot.
func (l *Limiter) checkWeight(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("%w, got %d", ErrWeight, n)
	case int64(n) > l.most:
		return fmt.Errorf("%w: weight %d, limit %d per %s", ErrOverLimit, n, l.most, l.window)
	}
	return nil
}

// Peek reports principal's state without counting anything: what Allow
// would decide for one more request of weight 1 now. Remaining is how many
// such requests the window has left, Allowed is Remaining >= 1, and ResetAt
// is when the window closes (for a principal with no open window, when one
// opened now would). It shares its counter with Allow, AllowN and requests
// whose Options.KeyFunc returns principal, and changes nothing, so peeking
// never uses up a limit.
//
// What it reads is the count the limiter decides on. With a store that is
// its counters' only writer (SQLite) that is the key's actor's count, read
// on the actor after every hit sent before it: it includes hits already
// counted whose verdicts still wait for their write to commit (a crash can
// lose only those, and then restarts from the stored bound, which covers
// every answered hit). With a shared store (PostgreSQL, Redis) it is the
// count committed in the store, on the store's clock, an expired window
// counting 0. Either way it is advisory: another request may count between
// Peek and the next Allow.
//
// It fails with ErrNoPrincipal for "", porch.ErrSaturated when the key's
// mailbox is full, the store's error when the read failed (a shared store), and
// ctx.Err().
func (l *Limiter) Peek(ctx context.Context, principal string) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	return l.peek(ctx, l.principalKey(principal))
}

// peek reads the counter key on its actor.
func (l *Limiter) peek(ctx context.Context, key string) (Verdict, error) {
	reply := actor.NewReply[Verdict]()
	answer := func(v count.Verdict, err error) { reply.Send(verdictOf(v), err) }
	err := l.pool.Send(key, func(shard int) { l.counter.Peek(shard, key, answer) })
	if err != nil {
		return Verdict{}, err
	}
	return reply.Wait(ctx)
}

// Reset empties principal's window and starts it over: its next request
// counts from 0, with the full limit for a full window from now. Clear a
// login counter after a successful login with it. A principal with no open
// window is left alone (its next request opens one); on SQLite that costs
// no write, so resetting after every successful login is cheap.
//
// Reset is exact and durable as counting is. It returns once the reset is
// in the store, so a restart, even a kill -9 after Reset returned, does not
// bring the old count back. A request whose Allow returned before Reset was
// called is cleared by it; one sent after Reset returned is counted after
// it; one in flight meanwhile is counted either before (and cleared) or
// after, never lost halfway. Requests already waiting for their verdict
// still get it.
//
// With Options.Lease on a shared store, the new window starts at the hits
// other instances' leases hold rather than at zero: they answer those from
// memory without hearing of the reset, so the store keeps them counted,
// until each is given back (when the key idles there, or by Close) or the
// window ends. So a window after a Reset may start up to Lease per
// instance holding one above zero, and never serves past the limit.
// Without leases it starts at zero.
//
// It fails with ErrNoPrincipal for "", porch.ErrSaturated when the key's
// mailbox is full, the store's error when the write failed, and ctx.Err().
// After a failed write the count may already be cleared in this process but
// not in the store, where a restart would find it: call Reset again.
func (l *Limiter) Reset(ctx context.Context, principal string) error {
	if principal == "" {
		return ErrNoPrincipal
	}
	return l.reset(ctx, l.principalKey(principal))
}

// reset clears the counter key on its actor and waits until that is
// durable.
func (l *Limiter) reset(ctx context.Context, key string) error {
	reply := actor.NewReply[struct{}]()
	answer := func(err error) { reply.Send(struct{}{}, err) }
	err := l.pool.Send(key, func(shard int) { l.counter.Reset(shard, key, answer) })
	if err != nil {
		return err
	}
	_, err = reply.Wait(ctx)
	return err
}
