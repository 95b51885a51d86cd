package idem

import (
	"bytes"
	"context"

	"github.com/writeonce/writeonce/porch/store"
)

// flight is one execution of a key's handler, from the moment an owner is
// chosen until its response is durable (or it gives the key up). Duplicates
// that arrive meanwhile hold the flight and wait on done; they are not
// registered anywhere, so one that leaves (its context ended) needs no
// cleanup.
//
// Fields below done are written once, before done is closed, and read only
// after it is closed.
type flight struct {
	owner  *caller // who runs the handler; compared by identity
	digest []byte
	done   chan struct{}

	res      store.Response // the durable response, when err is nil and !released
	err      error          // the store's error: the response was not stored
	released bool           // the owner gave up (5xx, panic, left): nothing stored
}

// caller identifies one request to the actor, so that an owner that left
// before learning it owned the key can give it back.
type caller struct{}

// decision is the actor's answer to a keyed request.
type decision struct {
	kind   outcome
	res    store.Response // outcomeReplay
	flight *flight        // outcomeOwn, outcomeWait
}

type outcome int

const (
	outcomeReplay   outcome = iota + 1 // a stored response whose digest matches
	outcomeConflict                    // the key was used for another request
	outcomeOwn                         // run the handler
	outcomeWait                        // an owner is running: wait on the flight
)

// shard is one actor's in-flight keys. Only that actor touches it.
type shard struct {
	flights map[string]*flight
}

// begin runs on key's actor: it decides what a request with this key and
// digest does.
func (m *Idempotent) begin(ctx context.Context, sh *shard, key string, digest []byte, c *caller) (decision, error) {
	if f, ok := sh.flights[key]; ok {
		if !bytes.Equal(f.digest, digest) {
			return decision{kind: outcomeConflict}, nil
		}
		return decision{kind: outcomeWait, flight: f}, nil
	}
	// No flight: whatever is stored is final. Reading here, on the actor,
	// means no owner can be chosen between this read and the decision.
	stored, ok, err := m.store.LoadResponse(ctx, key)
	if err != nil {
		return decision{}, err
	}
	if ok {
		if m.store.Now().Before(stored.Expires) {
			if !bytes.Equal(stored.Digest, digest) {
				return decision{kind: outcomeConflict}, nil
			}
			return decision{kind: outcomeReplay, res: stored}, nil
		}
		// Expired: prune it on this access. The owner's write, queued later,
		// lands after this delete.
		if err := m.store.DeleteResponse(key, m.store.Now(), nil); err != nil {
			return decision{}, err
		}
	}
	f := &flight{owner: c, digest: digest, done: make(chan struct{})}
	sh.flights[key] = f
	return decision{kind: outcomeOwn, flight: f}, nil
}

// finish runs on key's actor when the owner reports a response worth
// storing. The flight stays in the shard until the owner has seen it settle
// (see settle), so duplicates arriving meanwhile wait for durability too.
func (m *Idempotent) finish(f *flight, res store.Response) {
	err := m.store.SaveResponse(res, func(err error) {
		f.res, f.err = res, err
		close(f.done)
	})
	if err != nil {
		f.err = err
		close(f.done)
	}
}

// settle runs on key's actor once the flight is over: it lets the key go so
// the next request reads the stored row (or, if nothing was stored, owns the
// key afresh).
func (m *Idempotent) settle(sh *shard, key string, f *flight) {
	if sh.flights[key] == f {
		delete(sh.flights, key)
	}
}

// release runs on key's actor when the owner gives the key up without a
// response to store. Waiting duplicates wake, find no flight, and the first
// to reach the actor becomes the new owner.
func (m *Idempotent) release(sh *shard, key string, c *caller) {
	f, ok := sh.flights[key]
	if !ok || f.owner != c {
		return
	}
	delete(sh.flights, key)
	f.released = true
	close(f.done)
}
