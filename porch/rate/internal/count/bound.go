package count

import (
	"sync"
	"time"
)

// boundWrite is one queued write of a key's counter. Hits whose count it
// covers answer when it settles; until then they wait on it. The actor
// registers waiters and the committer settles it, so it is the one piece of
// limiter state two goroutines share.
type boundWrite struct {
	mu      sync.Mutex // protects the fields below
	settled bool
	err     error
	// first is the first waiter, kept apart from the rest: most writes
	// have one (the hit that queued it), which then costs no slice.
	first   *waiter
	waiters []*waiter
}

// waiter is a hit's answer held until the write that covers its count
// settles: the verdict for to, and the epoch it was counted in. Waiters
// are reused through pool (local.waiters), so that a hit that waits for a
// write allocates nothing.
type waiter struct {
	to    Replier
	v     Verdict
	start time.Time
	pool  *sync.Pool // where w goes back once it has answered
}

// answer tells w's hit how the write settled, and gives w back to its
// pool. A failed write answers no verdict at all: the request must not be
// served, and a caller that reads Allowed before the error must not find
// true.
func (w *waiter) answer(err error) {
	to, v, start := w.to, w.v, w.start
	*w = waiter{pool: w.pool}
	w.pool.Put(w)
	if err != nil {
		to.Reply(Verdict{}, time.Time{}, err)
		return
	}
	to.Reply(v, start, nil)
}

// replyFunc is a Replier that hears only the error: a reset's answer.
type replyFunc func(error)

func (f replyFunc) Reply(_ Verdict, _ time.Time, err error) { f(err) }

// wait answers w with the write's outcome: now if it has settled, else
// when it does.
func (b *boundWrite) wait(w *waiter) {
	b.mu.Lock()
	if !b.settled {
		if b.first == nil {
			b.first = w
		} else {
			b.waiters = append(b.waiters, w)
		}
		b.mu.Unlock()
		return
	}
	err := b.err
	b.mu.Unlock()
	w.answer(err)
}

// state reports whether the write has committed, or has failed.
func (b *boundWrite) state() (durable, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.settled && b.err == nil, b.settled && b.err != nil
}

// settle records the outcome and answers every waiter, in the order they
// waited. The committer calls it once.
func (b *boundWrite) settle(err error) {
	b.mu.Lock()
	b.settled, b.err = true, err
	first, waiters := b.first, b.waiters
	b.first, b.waiters = nil, nil
	b.mu.Unlock()
	if first != nil {
		first.answer(err)
	}
	for _, w := range waiters {
		w.answer(err)
	}
}

// nextBound is the count to persist when a hit's count passes what is
// already written: count plus a margin that doubles with the hits seen, up
// to ahead, never past limit. seen is count, plus, where epochs carry
// over, the key's streak of earlier epochs (see local.carry). The first hit
// of a window is written exactly, and a client that sends a handful of
// requests costs a handful of writes; a hot key, whose next bound is queued
// while half the margin is left, costs about one write per ahead/2 hits.
func nextBound(count, seen, ahead, limit int64) int64 {
	return min(count+min(seen-1, ahead), limit)
}
