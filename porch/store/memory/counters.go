package memory

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// counterEntry is a key's newest counter, and when the expiry queue will
// look at it again.
type counterEntry struct {
	c      driver.Counter
	queued time.Time
}

// ClaimPolicy records that a limiter counts under p until release is
// called, and fails with store.ErrPolicyConflict while another limiter of
// the same name counts in this store, under any policy: as on SQLite, each
// limiter keeps its counts in its own memory and writes them through, so
// two of one name would count apart and overwrite each other's counters.
func (s *Store) ClaimPolicy(_ context.Context, p driver.Policy) (release func(), err error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	s.d.mu.Unlock()
	return s.claims.ClaimAlone(p, "in the memory store")
}

// LoadCounters calls fn for every counter whose window is still open at
// now, after the store's lock is let go, so that fn may call the store.
func (s *Store) LoadCounters(_ context.Context, now time.Time, fn func(driver.Counter)) error {
	if err := s.lock(); err != nil {
		return err
	}
	live := make([]driver.Counter, 0, len(s.d.counters))
	for _, e := range s.d.counters {
		if now.Before(e.c.End()) {
			live = append(live, e.c)
		}
	}
	s.d.mu.Unlock()
	for _, c := range live {
		fn(c)
	}
	return nil
}

// SaveCounter makes c its key's newest counter and calls done(nil) before
// it returns: the write is done once it is in memory.
func (s *Store) SaveCounter(c driver.Counter, done func(error)) error {
	if err := s.lock(); err != nil {
		return err
	}
	now := s.Now()
	s.d.expire(now)
	e := s.d.counters[c.Key]
	if e == nil {
		e = &counterEntry{}
		s.d.counters[c.Key] = e
	}
	e.c = c
	e.queued = s.d.expiry.queue(e.queued, c.End(), c.Key, false)
	s.arm(now)
	s.d.mu.Unlock()
	s.committed()
	if done != nil {
		done(nil)
	}
	return nil
}
