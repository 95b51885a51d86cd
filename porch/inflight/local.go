package inflight

import (
	"context"
	"sync/atomic"

	"github.com/writeonce/porch-go/porch/internal/actor"
)

// local counts slots in the pool's actors: each key's count lives in the
// map of the shard its actor owns, so it is read and written by that
// actor only, and an acquire and a give-back of one key are applied in
// the order they were sent.
type local struct {
	pool  *actor.Pool
	limit int64
	held  []map[string]int64 // by shard; each touched only by its actor
}

func newLocal(pool *actor.Pool, limit int64) *local {
	held := make([]map[string]int64, pool.Size())
	for i := range held {
		held[i] = make(map[string]int64)
	}
	return &local{pool: pool, limit: limit, held: held}
}

// The states of an acquire, so that a caller that stops waiting and an
// actor that grants meanwhile agree on whether a slot was taken.
const (
	pending int32 = iota
	granted
	abandoned
)

// take is one acquire sent to an actor.
type take struct {
	state atomic.Int32
	done  chan int64 // the slots held after a grant, or -1 - held after a refusal
}

// acquire sends the take to key's actor and waits for its answer. A full
// mailbox fails at once (porch.ErrSaturated: the middleware answers 503).
// A caller whose ctx ends first abandons the take; if the actor granted it
// first, the slot is given back before acquire returns, so no slot
// outlives a caller that did not get it.
func (l *local) acquire(ctx context.Context, key string) (func(), int64, error) {
	t := &take{done: make(chan int64, 1)}
	err := l.pool.Send(key, func(shard int) {
		m := l.held[shard]
		n := m[key]
		if n >= l.limit {
			t.done <- -1 - n
			return
		}
		if !t.state.CompareAndSwap(pending, granted) {
			return // the caller has gone
		}
		m[key] = n + 1
		t.done <- n + 1
	})
	if err != nil {
		return nil, 0, err
	}
	var got int64
	select {
	case got = <-t.done:
	case <-ctx.Done():
		if t.state.CompareAndSwap(pending, abandoned) {
			return nil, 0, ctx.Err()
		}
		// Granted or refused already: its answer is on its way.
		if got = <-t.done; got > 0 {
			l.release(key)
		}
		return nil, 0, ctx.Err()
	}
	if got < 0 {
		return nil, -1 - got, ErrLimited
	}
	return func() { l.release(key) }, got, nil
}

// release gives a slot of key back. It waits for room in the actor's
// mailbox rather than fail: a lost give-back would hold the slot for the
// process's life. It fails only once the pool is closing, when the counts
// go with it.
func (l *local) release(key string) {
	l.pool.SendWait(key, func(shard int) { //nolint:errcheck // ErrClosed: the counts end with the pool
		m := l.held[shard]
		if n := m[key]; n > 1 {
			m[key] = n - 1
		} else {
			delete(m, key)
		}
	})
}

func (l *local) close(context.Context) error { return nil }
