package storetest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// database is a shared store's database held in memory: what every
// memStore opened on it reads and writes, as instances share PostgreSQL.
type database struct {
	mu     sync.Mutex
	states map[string]store.State
	claims map[string]*claim
}

type claim struct {
	p     store.Policy
	count int
}

// memStore is the smallest store.SharedCounters that keeps the rule's
// contract: each hit is decided under the database's lock, in one step,
// on one clock. It is a reference for a new driver, and proves the suite
// passes where the contract holds, for every algorithm.
type memStore struct {
	db     *database
	mu     sync.Mutex
	closed bool
}

var _ store.SharedCounters = (*memStore)(nil)

func (s *memStore) Wall() time.Time              { return time.Now() }
func (s *memStore) Health(context.Context) error { return s.check() }
func (s *memStore) Stats() store.Stats           { return store.Stats{} }

func (s *memStore) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// check fails a call after Close.
func (s *memStore) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// lock takes the database's lock, which makes each call one atomic step,
// and returns its release.
func (s *memStore) lock() func() { s.db.mu.Lock(); return s.db.mu.Unlock }

func (s *memStore) ClaimPolicy(_ context.Context, p store.Policy) (func(), error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	defer s.lock()()
	c := s.db.claims[p.Name]
	switch {
	case c == nil || c.count == 0:
		c = &claim{p: p}
		s.db.claims[p.Name] = c
	case !c.p.Equal(p):
		return nil, fmt.Errorf("%w: %s counts as %s", store.ErrPolicyConflict, p.Name, c.p)
	}
	c.count++
	var once sync.Once
	return func() { once.Do(func() { defer s.lock()(); c.count-- }) }, nil
}

func (s *memStore) AddHit(key string, rule store.Rule, n int64, done func(store.Hit, error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	now := time.Now()
	st := rule.Advance(s.db.states[key], now)
	h := store.Hit{State: st, Now: now}
	if n <= rule.Room(st, now) {
		h.Allowed = true
		h.State.Count += n
		s.db.states[key] = h.State
	}
	unlock()
	done(h, nil)
	return nil
}

func (s *memStore) PeekHit(key string, rule store.Rule, done func(store.Hit, error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	now := time.Now()
	h := store.Hit{State: rule.Advance(s.db.states[key], now), Now: now}
	unlock()
	done(h, nil)
	return nil
}

func (s *memStore) ResetHit(key string, done func(error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	if _, ok := s.db.states[key]; ok {
		s.db.states[key] = store.State{Start: time.Now()}
	}
	unlock()
	done(nil)
	return nil
}

func (s *memStore) TakeBack(key string, start time.Time, n int64, done func(error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	if st, ok := s.db.states[key]; ok && st.Start.Equal(start) {
		st.Count = max(st.Count-n, 0)
		s.db.states[key] = st
	}
	unlock()
	done(nil)
	return nil
}

// The suite passes on a store that keeps the contract, for every
// algorithm, two instances included.
func TestMemoryStore(t *testing.T) {
	var (
		mu  sync.Mutex
		dbs = map[string]*database{}
	)
	storetest.TestCounters(t, storetest.Harness{
		DB: func(t *testing.T) string {
			mu.Lock()
			defer mu.Unlock()
			name := t.Name()
			dbs[name] = &database{states: map[string]store.State{}, claims: map[string]*claim{}}
			return name
		},
		Open: func(t *testing.T, db string) store.Counters {
			mu.Lock()
			defer mu.Unlock()
			return &memStore{db: dbs[db]}
		},
	})
}
