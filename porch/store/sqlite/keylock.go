package sqlite

import (
	"context"
	"sync"
)

// keyLocks admits one holder per key at a time. The idempotency actor
// already admits one owner per key — but only per middleware: two
// middlewares (two routes, two listeners) on one SQLite store each have
// their own actors, and without this both would own the key at once and
// both run the handler. PostgreSQL's advisory lock does the same job
// across processes.
type keyLocks struct {
	mu sync.Mutex // protects held
	// held maps each held key to the channel its unlock closes, made by
	// the first holder to wait: nil while nobody waits, since almost no
	// key is contended and the channel cost every owner an allocation.
	held map[string]chan struct{}
}

// lock takes key, waiting under ctx while another holder has it.
func (l *keyLocks) lock(ctx context.Context, key string) error {
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

// tryLock takes key if no holder has it, without waiting.
func (l *keyLocks) tryLock(key string) bool {
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

// unlock gives key up and wakes its waiters; the first back takes it.
func (l *keyLocks) unlock(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if freed, ok := l.held[key]; ok {
		delete(l.held, key)
		if freed != nil {
			close(freed)
		}
	}
}
