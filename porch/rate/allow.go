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
}

// ErrNoPrincipal is returned by Allow for an empty principal: counting
// every caller that lacks one against one shared counter would be a limit
// nobody chose.
var ErrNoPrincipal = errors.New("rate: Allow needs a non-empty principal")

// Allow counts one request by principal (an API key, a user id) outside an
// HTTP handler, and returns the verdict once the new count is durable. It
// shares its counter with requests for which Options.Key returns the same
// principal, and like theirs the count survives a restart. It fails with
// ErrNoPrincipal for "", with porch.ErrSaturated when the key's mailbox is
// full, with the store's error when the write failed, and with ctx.Err().
// In every failure the caller must not serve the request.
func (l *Limiter) Allow(ctx context.Context, principal string) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	return l.allow(ctx, l.principalKey(principal))
}

// allow counts one request against the counter key.
func (l *Limiter) allow(ctx context.Context, key string) (Verdict, error) {
	// One closure on the hot path: the actor answers through reply directly.
	reply := porch.NewReply[Verdict]()
	err := l.pool.Send(key, func(shard int) {
		if l.exclusive != nil {
			l.hit(l.views[shard], key, reply)
		} else {
			l.hitShared(key, reply)
		}
	})
	var v Verdict
	if err == nil {
		v, err = reply.Wait(ctx)
	}
	if l.opt.Observer != nil {
		l.observe(ctx, v, err)
	}
	return v, err
}

// observe tells Options.Observer of a decision.
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
// seldom wait for a commit at all.
func (l *Limiter) hit(v *view, key string, reply porch.Reply[Verdict]) {
	now := l.exclusive.Now()
	v.forget(now, l.window, forgetPerHit)
	w, ok := v.counts[key]
	if !ok || !now.Before(w.start.Add(l.window)) {
		w = v.open(key, now) // a closed window is reset on this access
		l.armForget(v, now)
	}
	verdict := Verdict{Limit: l.limit, ResetAt: l.store.Wall().Add(w.start.Add(l.window).Sub(now))}
	if w.count >= l.limit {
		// Nothing changes, so nothing is written; a refusal never lets a
		// request through, so it need not wait for earlier writes.
		reply.Send(verdict, nil)
		return
	}
	w.count++
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
		w.pending.wait(func(err error) { reply.Send(verdict, err) })
	default:
		l.writeAhead(key, &w, func(err error) { reply.Send(verdict, err) })
	}
	v.counts[key] = w
}

// hitShared runs on key's actor when other processes write the same
// counters: the database counts, atomically, and the actor only orders this
// process's hits and lets the committer batch them.
func (l *Limiter) hitShared(key string, reply porch.Reply[Verdict]) {
	err := l.shared.AddHit(key, l.window, func(h store.Hit, err error) {
		v := Verdict{Limit: l.limit, ResetAt: l.store.Wall().Add(h.ResetIn), Allowed: h.Count <= l.limit}
		v.Remaining = max(l.limit-h.Count, 0)
		reply.Send(v, err)
	})
	if err != nil {
		reply.Send(Verdict{}, err)
	}
}
