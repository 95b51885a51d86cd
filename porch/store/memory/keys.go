package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// errNoSQL is why an owner's Exec fails on this store.
var errNoSQL = errors.New("memory: the memory store runs no SQL; a handler whose writes must commit with its response needs porch/store/sqlite or porch/store/postgres")

// responseEntry is a key's stored response, and when the expiry queue will
// look at it again.
type responseEntry struct {
	r      driver.Response
	queued time.Time
}

// Reserve holds key for its owner, waiting under ctx while another owner
// holds it. It fails with store.ErrClosed after Close.
func (s *Store) Reserve(ctx context.Context, key string) (driver.Reservation, error) {
	if err := s.lock(); err != nil {
		return nil, fmt.Errorf("memory: reserve: %w", err)
	}
	s.d.mu.Unlock()
	if err := s.keys.Lock(ctx, key); err != nil {
		return nil, fmt.Errorf("memory: reserve: %w", err)
	}
	return &reservation{s: s, key: key}, nil
}

// Inspect reads key's stored response unless an owner holds key
// (store.ErrKeyHeld). It holds key while it reads, so that no owner
// starts meanwhile.
func (s *Store) Inspect(_ context.Context, key string) (driver.Response, bool, error) {
	if !s.keys.TryLock(key) {
		return driver.Response{}, false, fmt.Errorf("memory: inspect: %w", store.ErrKeyHeld)
	}
	defer s.keys.Unlock(key)
	if err := s.lock(); err != nil {
		return driver.Response{}, false, fmt.Errorf("memory: inspect: %w", err)
	}
	defer s.d.mu.Unlock()
	r, ok := s.d.load(key, s.Now())
	return r, ok, nil
}

// Forget deletes key's stored response, holding key meanwhile; it fails
// with store.ErrKeyHeld while an owner holds key.
func (s *Store) Forget(_ context.Context, key string) error {
	if !s.keys.TryLock(key) {
		return fmt.Errorf("memory: forget: %w", store.ErrKeyHeld)
	}
	defer s.keys.Unlock(key)
	if err := s.lock(); err != nil {
		return fmt.Errorf("memory: forget: %w", err)
	}
	delete(s.d.responses, key)
	s.d.mu.Unlock()
	s.committed()
	return nil
}

// load returns a copy of key's response if it has not expired at now, and
// drops it if it has. d.mu is held.
func (d *data) load(key string, now time.Time) (driver.Response, bool) {
	e := d.responses[key]
	if e == nil {
		return driver.Response{}, false
	}
	if !now.Before(e.r.Expires) {
		delete(d.responses, key)
		return driver.Response{}, false
	}
	return clone(e.r), true
}

// clone copies r's slices and header, so that neither the caller who saved
// r nor one who loaded it can change what another reads, as no row in a
// database can be changed through a value read from it.
func clone(r driver.Response) driver.Response {
	r.Digest = bytes.Clone(r.Digest)
	r.Body = bytes.Clone(r.Body)
	if r.Body == nil {
		r.Body = []byte{} // an empty body is a value, as SQL drivers read it back
	}
	if len(r.Header) == 0 {
		r.Header = nil // none kept, as the SQL drivers read it back
	} else {
		r.Header = r.Header.Clone()
	}
	return r
}

// reservation is a held key. The owner's response is stored by Save; there
// is no transaction, so an Exec fails and takes the Save with it.
type reservation struct {
	s   *Store
	key string

	mu     sync.Mutex // protects ended and failed
	ended  bool
	failed error // the owner's failed Exec; Save returns it
}

func (r *reservation) Load(context.Context) (driver.Response, bool, error) {
	r.mu.Lock()
	ended := r.ended
	r.mu.Unlock()
	if ended {
		return driver.Response{}, false, driver.ErrReleased
	}
	if err := r.s.lock(); err != nil {
		return driver.Response{}, false, fmt.Errorf("memory: load: %w", err)
	}
	defer r.s.d.mu.Unlock()
	res, ok := r.s.d.load(r.key, r.s.Now())
	return res, ok, nil
}

// Exec fails with store.ErrWriteFailed: the memory store has no database
// to run query in, and storing the response without the owner's writes
// would record as done what was not. Save then fails with the same error
// and stores nothing, as after a failed statement on a SQL store.
func (r *reservation) Exec(context.Context, string, ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return driver.ErrReleased
	}
	if r.failed == nil {
		r.failed = fmt.Errorf("%w: %w", store.ErrWriteFailed, errNoSQL)
	}
	return r.failed
}

func (r *reservation) Save(_ context.Context, res driver.Response, ttl time.Duration) error {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return driver.ErrReleased
	}
	r.ended = true
	failed := r.failed
	r.mu.Unlock()
	// The key is given up only once the response is in, so that the next
	// owner's Load finds it.
	defer r.s.keys.Unlock(r.key)
	if failed != nil {
		r.s.failures.Add(1)
		return failed
	}
	if err := r.s.lock(); err != nil {
		return fmt.Errorf("memory: save: %w", err)
	}
	now := r.s.Now()
	r.s.d.expire(now)
	res = clone(res)
	res.Key, res.Created, res.Expires = r.key, now, now.Add(ttl)
	e := r.s.d.responses[r.key]
	if e == nil {
		e = &responseEntry{}
		r.s.d.responses[r.key] = e
	}
	e.r = res
	e.queued = r.s.d.expiry.queue(e.queued, res.Expires, r.key, true)
	r.s.arm(now)
	r.s.d.mu.Unlock()
	r.s.committed()
	return nil
}

func (r *reservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		r.s.keys.Unlock(r.key)
	}
}
