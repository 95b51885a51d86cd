// Package keylock holds idempotency keys within one process, for the
// stores whose process is the only one that owns keys (SQLite, memory).
package keylock

import (
	"context"
	"sync"
)

// Locks admits one holder per key at a time. The idempotency actor
// already admits one owner per key — but only per middleware: two
// middlewares (two routes, two listeners) on one store each have their
// own actors, and without this both would own the key at once and both
// run the handler. PostgreSQL's advisory lock does the same job across
// processes. The zero value is ready to use, and it is safe for
// concurrent use.
type Locks struct {
	mu sync.Mutex // protects held
	// held maps each held key to the channel its unlock closes, made by
	// the first holder to wait: nil while nobody waits, since almost no
	// key is contended and the channel cost every owner an allocation.
	held map[string]chan struct{}
}

// Lock takes key, waiting under ctx while another holder has it.
func (l *Locks) Lock(ctx context.Context, key string) error {
	for {
		l.mu.Lock()
		if l.held == nil {
			l.held = make(map[string]chan struct{})
		}
		freed, taken := l.held[key]
		if !taken {
			l.held[key] = nil
			l.mu.Unlock()
			return nil
		}
		if freed == nil {
			freed = make(chan struct{})
			l.held[key] = freed
		}
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryLock takes key if no holder has it, without waiting.
func (l *Locks) TryLock(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, taken := l.held[key]; taken {
		return false
	}
	if l.held == nil {
		l.held = make(map[string]chan struct{})
	}
	l.held[key] = nil
	return true
}

// Unlock gives key up and wakes its waiters; the first back takes it.
func (l *Locks) Unlock(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if freed, ok := l.held[key]; ok {
		delete(l.held, key)
		if freed != nil {
			close(freed)
		}
	}
}
