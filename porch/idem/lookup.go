package idem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/store"
)

// ErrKeyInFlight is returned by [Keys.Forget] while a request holds the
// key: it is running the handler (its response is not stored yet), or is
// reading the stored response to replay it. Try again once it is over.
var ErrKeyInFlight = errors.New("idem: a request holds the key")

// Scope names whose key a support tool means, as the middleware scoped it
// (see Options.Principal): set exactly one field.
type Scope struct {
	// Principal is what Options.Principal returned for the key's requests.
	Principal string
	// Addr is the client's address, for requests that had no principal:
	// an IP, with or without a port, or an IPv6 /64 prefix. An IPv6
	// address stands for its /64, as the middleware scopes it.
	Addr string
}

// KeyPhase is where a key stands: absent, in flight or stored.
type KeyPhase uint8

// The phases of a key.
const (
	// KeyAbsent: nothing is stored under the key, or it has expired; its
	// next request runs the handler.
	KeyAbsent KeyPhase = iota + 1
	// KeyInFlight: a request holds the key, in this process or (on a
	// shared store) another: it runs the handler, or reads the stored
	// response to replay it.
	KeyInFlight
	// KeyStored: a response is stored and is replayed to the key's
	// retries until it expires.
	KeyStored
)

// String is the phase's label: "absent", "in_flight" or "stored".
func (p KeyPhase) String() string {
	switch p {
	case KeyAbsent:
		return "absent"
	case KeyInFlight:
		return "in_flight"
	case KeyStored:
		return "stored"
	}
	return "idem.KeyPhase(" + strconv.Itoa(int(p)) + ")"
}

// KeyState is what [Keys.Lookup] found under a key.
type KeyState struct {
	Phase KeyPhase
	// Status, Created and Expires describe the stored response when Phase
	// is KeyStored, and are zero otherwise.
	Status           int
	Created, Expires time.Time
}

// Lookup reports the state of key (as the client sent it, unquoted) in
// scope, for a support tool: absent, in flight, or stored with its
// status and expiry. A key in flight in this process is seen on its actor;
// one held on another instance sharing a PostgreSQL store, by its lock,
// which Lookup tries without waiting. It does not change the key.
func (m *Keys) Lookup(ctx context.Context, scope Scope, key string) (KeyState, error) {
	k, err := m.scopedKey(scope, key)
	if err != nil {
		return KeyState{}, err
	}
	if flying, err := m.flying(ctx, k); err != nil || flying {
		return KeyState{Phase: KeyInFlight}, err
	}
	row, ok, err := m.store.Inspect(ctx, k)
	switch {
	case errors.Is(err, store.ErrKeyHeld):
		return KeyState{Phase: KeyInFlight}, nil
	case err != nil:
		return KeyState{}, fmt.Errorf("idem: lookup: %w", err)
	case !ok:
		return KeyState{Phase: KeyAbsent}, nil
	}
	return KeyState{Phase: KeyStored, Status: row.Status, Created: row.Created, Expires: row.Expires}, nil
}

// Forget deletes the response stored under key in scope, so that the key's
// next request runs the handler: a support tool's remedy for a stored
// answer the client cannot get past (a 4xx it has since corrected). It
// returns once the deletion is durable; a key with nothing stored is left
// as it is. It fails with [ErrKeyInFlight], deleting nothing, while a
// request holds the key, in this process or another instance's.
//
// Forget does not undo the handler's side effects: a retry runs the
// handler again, and writes it again.
func (m *Keys) Forget(ctx context.Context, scope Scope, key string) error {
	k, err := m.scopedKey(scope, key)
	if err != nil {
		return err
	}
	if flying, err := m.flying(ctx, k); err != nil {
		return err
	} else if flying {
		return ErrKeyInFlight
	}
	err = m.store.Forget(ctx, k)
	if errors.Is(err, store.ErrKeyHeld) {
		return ErrKeyInFlight
	}
	if err != nil {
		return fmt.Errorf("idem: forget: %w", err)
	}
	return nil
}

// scopedKey is the stored key of key in scope, as scope makes it for a
// request.
func (m *Keys) scopedKey(scope Scope, key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	switch {
	case (scope.Principal == "") == (scope.Addr == ""):
		return "", errors.New("idem: a Scope names a principal or an address, not both or neither")
	case scope.Principal != "":
		return principalKey(scope.Principal, key), nil
	}
	return addrKey(clientip.AddrKey(scope.Addr), key), nil
}

// flying asks key's actor whether a request of this middleware leads a
// flight of key.
func (m *Keys) flying(ctx context.Context, key string) (bool, error) {
	reply := actor.NewReply[bool]()
	if err := m.pool.Send(key, func(i int) {
		reply.Send(m.shards[i].flying(key), nil)
	}); err != nil {
		return false, err
	}
	return reply.Wait(ctx)
}
