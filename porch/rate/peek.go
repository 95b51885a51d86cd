package rate

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

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
// every answered hit). With a shared store (PostgreSQL) it is the count
// committed in the database, on the database's clock, an expired window
// counting 0. Either way it is advisory: another request may count between
// Peek and the next Allow.
//
// It fails with ErrNoPrincipal for "", porch.ErrSaturated when the key's
// mailbox is full, the store's error when the read failed (PostgreSQL), and
// ctx.Err().
func (l *Limiter) Peek(ctx context.Context, principal string) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	return l.peek(ctx, l.principalKey(principal))
}

// peek reads the counter key on its actor.
func (l *Limiter) peek(ctx context.Context, key string) (Verdict, error) {
	reply := porch.NewReply[Verdict]()
	err := l.pool.Send(key, func(shard int) {
		if l.exclusive != nil {
			reply.Send(l.peekView(l.views[shard], key), nil)
			return
		}
		err := l.shared.PeekHit(key, l.window, func(h store.Hit, err error) {
			reply.Send(l.peeked(h.Count, h.ResetIn), err)
		})
		if err != nil {
			reply.Send(Verdict{}, err)
		}
	})
	if err != nil {
		return Verdict{}, err
	}
	return reply.Wait(ctx)
}

// peekView runs on key's actor when the store is the counters' only writer.
// A closed window counts 0, as the next hit would reset it.
func (l *Limiter) peekView(v *view, key string) Verdict {
	now := l.exclusive.Now()
	w, ok := v.counts[key]
	if !ok || !now.Before(w.start.Add(l.window)) {
		return l.peeked(0, l.window)
	}
	return l.peeked(w.count, w.start.Add(l.window).Sub(now))
}

// peeked is Peek's verdict for a window holding count with resetIn left.
func (l *Limiter) peeked(count int64, resetIn time.Duration) Verdict {
	left := max(l.limit-count, 0)
	return Verdict{Allowed: left >= 1, Limit: l.limit, Remaining: left, ResetAt: l.store.Wall().Add(resetIn)}
}
