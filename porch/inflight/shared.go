package inflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// shared counts slots in a store several instances share. Each slot is a
// leased row (or set member) of its key; one goroutine renews every slot
// this limiter holds every third of the lease, in one round trip.
type shared struct {
	st    driver.SharedSlots
	limit int64
	lease time.Duration
	errs  *errlog.Log
	name  string

	mu     sync.Mutex // protects held and closed
	held   map[string]driver.SlotRef
	closed bool // Close has begun: a slot granted now would not be renewed

	// orphans are the slots of failed acquires, which may have been
	// taken (a lost reply): the giving-back goroutine releases them, so
	// that a failed acquire's 503 does not wait one more store timeout.
	orphans chan driver.SlotRef

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newShared(st driver.SharedSlots, limit int64, lease time.Duration, errs *errlog.Log, name string) *shared {
	s := &shared{st: st, limit: limit, lease: lease, errs: errs, name: name,
		held: make(map[string]driver.SlotRef), orphans: make(chan driver.SlotRef, maxOrphans),
		stop: make(chan struct{})}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.renewLoop()
	}()
	go func() {
		defer s.wg.Done()
		s.releaseOrphans()
	}()
	return s
}

// maxOrphans bounds the failed acquires' slots waiting to be given back.
// Past it (a store out of reach, failing every acquire) one is left to
// its lease, which frees it all the same.
const maxOrphans = 1024

// newID is a holder's id: 128 random bits, so that no two requests of any
// instance share one.
func newID() string {
	var b [16]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// acquire takes a slot in the store. A failed acquire may have taken the
// slot all the same (the reply was lost): it is handed to the giving-back
// goroutine, so that the failure is answered now, and its lease frees it
// should that fail too.
func (s *shared) acquire(ctx context.Context, key string) (func(), int64, error) {
	id := newID()
	ok, held, err := s.st.AcquireSlot(ctx, key, id, s.limit, s.lease)
	if err != nil {
		select {
		case s.orphans <- driver.SlotRef{Key: key, ID: id}:
		default: // the store is out of reach: the lease frees it
		}
		return nil, 0, err
	}
	if !ok {
		return nil, held, ErrLimited
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.giveBack(ctx, key, id)
		return nil, 0, ErrClosed
	}
	s.held[id] = driver.SlotRef{Key: key, ID: id}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.held, id)
		s.mu.Unlock()
		s.giveBack(ctx, key, id)
	}, held, nil
}

// giveBack releases id's slot, whether or not the request's context has
// ended (a client that hung up still gives its slot back); the store
// bounds the call. A failure is logged: the slot, no longer renewed, is
// free within one lease.
func (s *shared) giveBack(ctx context.Context, key, id string) {
	if err := s.st.ReleaseSlot(context.WithoutCancel(ctx), key, id); err != nil {
		s.errs.Error(ctx, "inflight: could not give a slot back; its lease frees it", "limiter", s.name, "lease", s.lease, "err", err)
	}
}

// releaseOrphans gives back the slots of failed acquires until Close;
// those still queued then are left to their leases.
func (s *shared) releaseOrphans() {
	for {
		select {
		case <-s.stop:
			return
		case o := <-s.orphans:
			s.giveBack(context.Background(), o.Key, o.ID)
		}
	}
}

// renewLoop renews every held slot every third of the lease until Close.
func (s *shared) renewLoop() {
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.renew()
		}
	}
}

// renew extends the leases of the slots held now. One that the store
// reports lost had expired before its renewal (the store was out of
// reach for a whole lease): another request may have its place, so the
// key may have had one request more in flight than its limit.
func (s *shared) renew() {
	s.mu.Lock()
	refs := make([]driver.SlotRef, 0, len(s.held))
	for _, r := range s.held {
		refs = append(refs, r)
	}
	s.mu.Unlock()
	if len(refs) == 0 {
		return
	}
	ctx := context.Background()
	lost, err := s.st.RenewSlots(ctx, refs, s.lease)
	if err != nil {
		s.errs.Error(ctx, "inflight: could not renew slots' leases", "limiter", s.name, "slots", len(refs), "err", err)
		return
	}
	if lost > 0 {
		s.errs.Error(ctx, "inflight: slots expired before their renewal", "limiter", s.name, "lost", lost, "lease", s.lease)
	}
}

func (s *shared) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
