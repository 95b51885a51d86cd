package memory

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/keylock"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
)

// Options configure a memory store. The zero value is ready to use.
type Options struct {
	// Clock supplies the wall and monotonic readings; a test passes
	// porchtest.FakeClock to move time without waiting. If nil,
	// clock.System{}.
	Clock clock.Clock
}

// Store keeps counters and idempotency keys in the process's memory, and
// nothing anywhere else (see the package doc for what that costs). Create
// it with [Open]; it is safe for concurrent use.
//
// Pass it to rate.New, idem.New or kit; an application calls Close, Health and Stats. Its
// other methods implement porch/store/driver for those packages and are
// not for calling directly.
type Store struct {
	d        *data
	clock    clock.Clock
	anchor   time.Time     // the timeline's origin: the wall clock at open, or later (see Now)
	mono     time.Duration // the monotonic reading at anchor
	keys     keylock.Locks // idempotency keys held by owners
	claims   policy.Claims // the rate policies the limiters count under
	closed   bool          // protected by d.mu, so that no write lands after Close
	sweep    *time.Timer   // lets expired entries go when no write passes them (see arm)
	sweepAt  time.Time     // when sweep is set to fire, on the timeline; zero: not set. Protected by d.mu
	commits  atomic.Int64
	writes   atomic.Int64
	failures atomic.Int64
}

var (
	_ driver.ExclusiveCounters = (*Store)(nil)
	_ driver.KeyStore          = (*Store)(nil)
	_ driver.Slots             = (*Store)(nil)
)

// Open returns an empty store. It takes at most one Options; memory.Open()
// is the zero Options. The error is for a second Options, and lets
// kit.Open(memory.Open()) take it as it takes a driver that can fail to
// open.
func Open(opt ...Options) (*Store, error) {
	if len(opt) > 1 {
		return nil, errors.New("memory: Open takes at most one Options")
	}
	var o Options
	if len(opt) == 1 {
		o = opt[0]
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	s := &Store{d: newData(), clock: o.Clock, anchor: o.Clock.Wall(), mono: o.Clock.Monotonic()}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	// Made stopped and armed under d.mu, so that its callback cannot run
	// before s.sweep is set.
	s.sweep = time.AfterFunc(time.Hour, s.sweepTick)
	s.sweep.Stop()
	s.arm(s.Now())
	return s, nil
}

// Now reads the store's timeline: the wall clock at open advanced by the
// monotonic clock, so that windows and expiry are measured on a clock that
// never jumps.
func (s *Store) Now() time.Time { return s.anchor.Add(s.clock.Monotonic() - s.mono) }

// Wall reads the wall clock.
func (s *Store) Wall() time.Time { return s.clock.Wall() }

// Health reports store.ErrClosed after Close, and nil before: a write to
// memory cannot fail.
func (s *Store) Health(ctx context.Context) error {
	if err := s.lock(); err != nil {
		return err
	}
	s.d.mu.Unlock()
	return nil
}

// Stats counts each write as a commit of one write: there is no batch.
// A Save that failed because the owner's Exec did is a failed commit.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Writes: s.writes.Load(), Failed: s.failures.Load()}
}

// Close ends the store: every later write fails with store.ErrClosed, and
// what it held is dropped. There is nothing to flush, so it returns nil
// at once, and again if called twice.
func (s *Store) Close(context.Context) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.sweep.Stop()
	}
	return nil
}

// lock takes the data's lock for a call, or fails with store.ErrClosed
// after Close; the caller unlocks s.d.mu.
func (s *Store) lock() error {
	s.d.mu.Lock()
	if s.closed {
		s.d.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

// committed counts one write done.
func (s *Store) committed() {
	s.commits.Add(1)
	s.writes.Add(1)
}

// data is what a store holds: its counters and responses, and the queue
// of when each may be forgotten.
type data struct {
	mu        sync.Mutex // protects the fields below
	counters  map[string]*counterEntry
	responses map[string]*responseEntry
	expiry    expiries
	// peak is len(counters)+len(responses) at its largest since the maps
	// were last rebuilt: Go maps and slices never give memory back as
	// entries leave, so shrink rebuilds them once they hold a quarter.
	peak int
}

func newData() *data {
	return &data{counters: make(map[string]*counterEntry), responses: make(map[string]*responseEntry)}
}

// SlotsShared reports false: only this process counts slots in a memory
// store, so the in-flight limiter counts them in its actors (see
// driver.Slots).
func (s *Store) SlotsShared() bool { return false }
