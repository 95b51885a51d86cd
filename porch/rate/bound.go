package rate

import "sync"

// defaultWriteAhead is Options.WriteAhead's default.
const defaultWriteAhead = 256

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
	first   func(error)
	waiters []func(error)
}

// wait calls fn with the write's outcome: now if it has settled, else when it
// does.
func (b *boundWrite) wait(fn func(error)) {
	b.mu.Lock()
	if !b.settled {
		if b.first == nil {
			b.first = fn
		} else {
			b.waiters = append(b.waiters, fn)
		}
		b.mu.Unlock()
		return
	}
	err := b.err
	b.mu.Unlock()
	fn(err)
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
		first(err)
	}
	for _, fn := range waiters {
		fn(err)
	}
}

// nextBound is the count to persist when a hit's count passes what is
// already written: count plus a margin that doubles with the hits seen, up
// to ahead, never past limit. seen is count, plus, where epochs carry
// over, the key's streak of earlier epochs (see local.carry). The first hit of a window
// is written exactly, and a client that sends a handful of requests costs a
// handful of writes; a hot key, whose next bound is queued while half the
// margin is left, costs about one write per ahead/2 hits.
func nextBound(count, seen, ahead, limit int64) int64 {
	return min(count+min(seen-1, ahead), limit)
}
