package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/rate/internal/count"
)

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

// Reply is the engine's answer to the call's hit, the call being its Replier: on
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

// verdictOf is the Verdict a client is told of the engine's v.
func verdictOf(v count.Verdict) Verdict {
	return Verdict{Allowed: v.Allowed, Limit: v.Limit, Remaining: v.Remaining, ResetAt: v.ResetAt, RetryAt: v.RetryAt}
}
