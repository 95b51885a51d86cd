package rate

import (
	"context"
	"fmt"
	"time"

	"github.com/writeonce/porch-go/porch"
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

// allow counts one request of weight n (1 <= n <= limit) against the
// counter key.
func (l *Limiter) allow(ctx context.Context, key string, n int64) (Verdict, error) {
	v, _, err := l.allowAt(ctx, key, n)
	return v, err
}

// allowAt is allow that also returns when the epoch the hit was counted in
// started, for a take-back (see Options.CountStatus).
func (l *Limiter) allowAt(ctx context.Context, key string, n int64) (Verdict, time.Time, error) {
	v, start, err := l.send(ctx, key, n)
	if l.opt.Observer != nil {
		l.observe(ctx, v, err)
	}
	return v, start, err
}

// send takes the hit to key's actor and waits for its verdict.
func (l *Limiter) send(ctx context.Context, key string, n int64) (Verdict, time.Time, error) {
	c, err := l.post(key, n)
	if err != nil {
		return Verdict{}, time.Time{}, err
	}
	return l.await(ctx, c)
}

// post hands a hit of weight n to key's actor without waiting, so that a
// Set can have all its limiters count at once; await collects the verdict.
func (l *Limiter) post(key string, n int64) (*call, error) {
	c := l.calls.Get().(*call)
	c.key, c.n = key, n
	if err := l.pool.Send(key, c.run); err != nil {
		l.calls.Put(c) // the job never runs
		return nil, err
	}
	return c, nil
}

// await waits for the verdict of a call that post handed out, and returns
// with it when the window the hit was counted in opened (see takeBack).
func (l *Limiter) await(ctx context.Context, c *call) (Verdict, time.Time, error) {
	v, err := c.reply.Wait(ctx)
	if err != nil {
		// It may be ctx's error, with the job still queued or running: the
		// actor may yet write c.start, so it is neither read here nor
		// reused, but left to the garbage collector. The zero start is
		// never used, since a hit without a verdict is not given back.
		return v, time.Time{}, err
	}
	// A nil error is the actor's answer, never ctx's: the reply has been
	// sent and received, so nothing else can write to the call.
	start := c.start
	c.key, c.start = "", time.Time{}
	l.calls.Put(c)
	return v, start, nil
}

// call is one verdict's trip to the key's actor and back. Calls are reused
// through Limiter.calls, so that a verdict allocates neither its job
// closure nor its reply channel; the counter reads key and n, and Reply
// sets start, before the answer is sent, and the caller touches them
// again only after the answer. What the engine keeps of a hit meanwhile
// is its own.
type call struct {
	key   string
	n     int64
	start time.Time // the window the hit was counted in: the store's timeline (exclusive) or the database's clock (shared)
	reply actor.Reply[Verdict]
	run   func(shard int) // the job, bound once to this call
}

// Reply is the engine's answer to the call's hit (see count.Replier): on
// an error, no verdict, so that a caller that reads Allowed before the
// error cannot find true.
func (c *call) Reply(v count.Verdict, start time.Time, err error) {
	if err != nil {
		c.reply.Send(Verdict{}, err)
		return
	}
	c.start = start
	c.reply.Send(verdictOf(v), nil)
}

// newCall is Limiter.calls' New.
func (l *Limiter) newCall() any {
	c := &call{reply: actor.NewReply[Verdict]()}
	c.run = func(shard int) {
		// Checked on the actor: Close sets closed before it queues its
		// flush there, so a hit that runs after the flush is refused
		// rather than counted in a memory that is no longer written out,
		// beside the limiter that takes the Name next.
		if l.closed.Load() {
			c.reply.Send(Verdict{}, porch.ErrClosed)
			return
		}
		l.counter.Hit(shard, c.key, c.n, c)
	}
	return c
}

// observe tells Options.Observer of a decision. A dry run's would-be
// refusal is a limited decision: the observer counts what the limit would do.
func (l *Limiter) observe(ctx context.Context, v Verdict, err error) {
	o := Allowed
	switch {
	case err != nil:
		o = Unavailable
	case !v.Allowed:
		o = Limited
	}
	if err != nil {
		v = Verdict{}
	}
	l.opt.Observer.RateDecision(ctx, l.opt.Name, o, v)
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

// takeBack gives back a hit of weight n that key's actor counted in the
// epoch that started at start, for a request a Set refused after all (see
// Set). It goes through key's actor, so that it is ordered with the key's
// hits: a request this process counts after the take-back was queued sees
// the count without it. It never waits for a write. A take-back that
// cannot be queued (the pool is closing) or whose write fails leaves the
// count high, the safe side, and is logged.
func (l *Limiter) takeBack(key string, start time.Time, n int64) {
	// SendWait, not Send: a report that must not be lost, not new work.
	err := l.pool.SendWait(key, func(shard int) { l.counter.TakeBack(shard, key, start, n) })
	if err != nil {
		l.takeBackDone(err)
	}
}

// takeBackDone logs a take-back that failed; the count stays high.
func (l *Limiter) takeBackDone(err error) {
	lostTakeBacks(l.errs, l.opt.Name)(err)
}
