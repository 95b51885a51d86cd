package storetest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/storetest"
)

// database is a shared store's database held in memory: what every
// memStore opened on it reads and writes, as instances share PostgreSQL.
type database struct {
	mu     sync.Mutex
	states map[string]driver.State
	holds  map[string]hold
	claims map[string]*claim
}

// hold is what leases hold of a key's count (driver.Lease): the hits they
// counted and neither settled nor gave back, since from, the first start
// of the epochs resets have replaced since a window last closed, in the
// window of length window (the rule's, at its last hit).
type hold struct {
	leased int64
	from   time.Time
	window time.Duration
}

// applies reports whether a lease's hits counted in the epoch start are
// still held in a key whose state starts at cur.
func (h hold) applies(start, cur time.Time) bool {
	return !start.Before(h.from) && !start.After(cur)
}

type claim struct {
	p     driver.Policy
	count int
}

// memStore is the smallest driver.SharedCounters that keeps the rule's
// contract: each hit is decided under the database's lock, in one step,
// on one clock. It is a reference for a new driver, and proves the suite
// passes where the contract holds, for every algorithm.
type memStore struct {
	db     *database
	mu     sync.Mutex
	closed bool
}

var _ driver.SharedCounters = (*memStore)(nil)

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

func (s *memStore) ClaimPolicy(_ context.Context, p driver.Policy) (func(), error) {
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

func (s *memStore) AddHit(key string, rule driver.Rule, n int64, lease driver.Lease, done func(driver.Hit, error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	now := time.Now()
	old := s.db.states[key]
	st := rule.Advance(old, now)
	hd := s.db.holds[key]
	if !st.Start.Equal(old.Start) {
		hd = hold{from: st.Start} // a new epoch: nothing held before it
	}
	hd.window = rule.Window()
	if lease.Settled > 0 && hd.applies(lease.Start, st.Start) {
		hd.leased = max(hd.leased-lease.Settled, 0)
	}
	if lease.Adopted > 0 && lease.Start.Equal(st.Start) {
		hd.leased += lease.Adopted
	}
	h := driver.Hit{State: st, Now: now}
	if n <= rule.Room(st, now) {
		h.Allowed = true
		h.State.Count += n
		hd.leased += lease.Held
		s.db.states[key] = h.State
	}
	if _, ok := s.db.states[key]; ok {
		s.db.holds[key] = hd
	}
	unlock()
	done(h, nil)
	return nil
}

func (s *memStore) PeekHit(key string, rule driver.Rule, done func(driver.Hit, error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	now := time.Now()
	h := driver.Hit{State: rule.Advance(s.db.states[key], now), Now: now}
	unlock()
	done(h, nil)
	return nil
}

func (s *memStore) ResetHit(key string, done func(error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	if st, ok := s.db.states[key]; ok {
		now := time.Now()
		hd := s.db.holds[key]
		held := min(hd.leased, st.Count)
		if !now.Before(st.Start.Add(hd.window)) {
			held = 0 // the window has closed: no lease answers past it
		}
		if held == 0 {
			hd.from = now
		}
		hd.leased = held
		s.db.states[key] = driver.State{Start: now, Count: held}
		s.db.holds[key] = hd
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

func (s *memStore) GiveBack(key string, lease driver.Lease, done func(error)) error {
	if err := s.check(); err != nil {
		return err
	}
	unlock := s.lock()
	if st, ok := s.db.states[key]; ok && s.db.holds[key].applies(lease.Start, st.Start) {
		hd := s.db.holds[key]
		st.Count = max(st.Count-lease.Held, 0)
		hd.leased = max(hd.leased-lease.Held-lease.Settled, 0)
		s.db.states[key], s.db.holds[key] = st, hd
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
			dbs[name] = &database{states: map[string]driver.State{}, holds: map[string]hold{}, claims: map[string]*claim{}}
			return name
		},
		Open: func(t *testing.T, db string) driver.Counters {
			mu.Lock()
			defer mu.Unlock()
			return &memStore{db: dbs[db]}
		},
	})
}
