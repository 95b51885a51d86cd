package rate

import (
	"context"
	"errors"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// Verdict is a limiter's decision for one request, with what the response
// headers report.
type Verdict struct {
	Allowed   bool
	Limit     int64
	Remaining int64
	// ResetAt is when the window closes, on the wall clock, fixed when the
	// verdict was made so that every response of one window reports the
	// same instant however long its write took.
	ResetAt time.Time
	// DryRun marks a verdict of a limiter in Options.DryRun, which the
	// middleware serves whatever Allowed says: Allowed is what enforcing
	// would have decided.
	DryRun bool
}

// ErrNoPrincipal is returned by Allow, AllowN, Peek and Reset for an empty
// principal: counting every caller that lacks one against one shared
// counter would be a limit nobody chose.
var ErrNoPrincipal = errors.New("rate: a principal must not be empty")

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
	v, err := l.send(ctx, key, n)
	if l.opt.Observer != nil {
		l.observe(ctx, v, err)
	}
	return v, err
}

// send takes the hit to key's actor and waits for its verdict.
func (l *Limiter) send(ctx context.Context, key string, n int64) (Verdict, error) {
	c, err := l.post(key, n)
	if err != nil {
		return Verdict{}, err
	}
	v, _, err := l.await(ctx, c)
	return v, err
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
// closure nor its reply channel; the actor copies key and n, and sets
// start, before it answers, and the caller touches them again only after
// the answer.
type call struct {
	key   string
	n     int64
	start time.Time // the window the hit was counted in: the store's timeline (exclusive) or the database's clock (shared)
	reply porch.Reply[Verdict]
	run   func(shard int) // the job, bound once to this call
}

// newCall is Limiter.calls' New.
func (l *Limiter) newCall() any {
	c := &call{reply: porch.NewReply[Verdict]()}
	c.run = func(shard int) {
		if l.exclusive != nil {
			l.hit(l.views[shard], c.key, c.n, &c.start, c.reply)
		} else {
			l.hitShared(c.key, c.n, &c.start, c.reply)
		}
	}
	return c
}

// observe tells Options.Observer of a decision. A dry run's would-be
// refusal is a limited decision: the observer counts what the limit would do.
func (l *Limiter) observe(ctx context.Context, v Verdict, err error) {
	o := porch.RateAllowed
	switch {
	case err != nil:
		o = porch.RateUnavailable
	case !v.Allowed:
		o = porch.RateLimited
	}
	l.opt.Observer.RateDecision(ctx, l.opt.Name, o)
}

// hit runs on key's actor when the store is the counters' only writer. The
// verdict is sent once the store holds a count at least this hit's: at once
// when a committed write already covers it, after the queued write that
// covers it commits, or after a new write (see nextBound) commits. A hot key
// (see hot) queues its next write while half its margin is left, so its hits
// seldom wait for a commit at all. It sets *start to the window's start
// before it answers.
func (l *Limiter) hit(v *view, key string, n int64, start *time.Time, reply porch.Reply[Verdict]) {
	now := l.exclusive.Now()
	v.forget(now, l.window, forgetPerHit)
	w, ok := v.counts[key]
	if !ok || !now.Before(w.start.Add(l.window)) {
		w = v.open(key, now) // a closed window is reset on this access
		l.armForget(v, now)
	}
	*start = w.start
	verdict := Verdict{Limit: l.limit, Remaining: max(l.limit-w.count, 0), ResetAt: l.store.Wall().Add(w.start.Add(l.window).Sub(now))}
	// Written as n > limit-count, not count+n > limit: the difference
	// cannot wrap, whatever a loaded count (or a future limit) holds.
	if n > l.limit-w.count {
		// Nothing changes, so nothing is written; a refusal never lets a
		// request through, so it need not wait for earlier writes.
		reply.Send(verdict, nil)
		return
	}
	w.count += n
	verdict.Allowed = true
	verdict.Remaining = l.limit - w.count
	if w.pending != nil {
		if durable, failed := w.pending.state(); durable {
			w.durable, w.pending, w.pendingAt = max(w.durable, w.pendingAt), nil, 0
		} else if failed {
			w.pending, w.pendingAt = nil, 0 // its waiters got the error; write again
		}
	}
	switch {
	case w.count <= w.durable:
		reply.Send(verdict, nil) // the common case: no write, no wait
		if l.hot(w) {
			l.writeAhead(key, &w, nil)
		}
	case w.pending != nil && w.count <= w.pendingAt:
		w.pending.wait(func(err error) { sendVerdict(reply, verdict, err) })
	default:
		l.writeAhead(key, &w, func(err error) { sendVerdict(reply, verdict, err) })
	}
	v.counts[key] = w
}

// sendVerdict answers a hit whose write settled with err. A failed write
// answers no verdict at all: the request must not be served, and a caller
// that reads Allowed before the error must not find true.
func sendVerdict(reply porch.Reply[Verdict], v Verdict, err error) {
	if err != nil {
		v = Verdict{}
	}
	reply.Send(v, err)
}

// hitShared runs on key's actor when other processes write the same
// counters: the database counts, atomically, and the actor only orders this
// process's hits and lets the committer batch them. It sets *start to the
// window's start before it answers.
func (l *Limiter) hitShared(key string, n int64, start *time.Time, reply porch.Reply[Verdict]) {
	err := l.shared.AddHit(key, l.window, n, l.limit, func(h store.Hit, err error) {
		if err != nil {
			// A failed batch leaves h zero, which would read as an
			// empty window allowing the hit.
			reply.Send(Verdict{}, err)
			return
		}
		*start = h.WindowStart
		v := Verdict{Limit: l.limit, ResetAt: l.store.Wall().Add(h.ResetIn), Allowed: h.Count <= l.limit}
		counted := h.Count // a refused hit's Count includes its weight, which was not counted
		if !v.Allowed {
			counted -= n
		}
		v.Remaining = max(l.limit-counted, 0)
		reply.Send(v, err)
	})
	if err != nil {
		reply.Send(Verdict{}, err)
	}
}
