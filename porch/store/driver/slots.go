package driver

import (
	"context"
	"time"
)

// Slots is what the in-flight limiter (porch/inflight) needs of a store:
// where the slots of the requests a key has in flight are counted. A
// driver declares which of two kinds it is with SlotsShared:
//
//   - false: only this process counts slots in the store (SQLite,
//     memory). The limiter keeps each key's count in its actor's memory
//     and the store does nothing more; a process that dies takes its
//     slots with it.
//   - true: several processes share the store's slots (PostgreSQL,
//     Redis), and the store implements [SharedSlots]. inflight.New
//     refuses a store that says true without it.
//
// A slot is volatile by design: it means "a request is running now", so
// it need not be durable before it is visible, nor survive a restart of
// the store. What a shared store must do is count exactly (never more
// than the limit held at once by live holders) and forget the slot of a
// holder that stopped renewing it within its lease. A driver may trade
// the durability of the last moments' slot changes for speed (PostgreSQL
// commits them at synchronous_commit off) if it documents what a crash
// of the store then forgets: a forgotten acquire admits at most one
// request more per forgotten slot while its holder's request runs, and
// the holder's next renewal reports it lost.
// porch/store/storetest.TestSlots is the suite a shared driver passes.
type Slots interface {
	Store
	// SlotsShared reports whether other processes count slots in this
	// store, so that it implements SharedSlots (see Slots).
	SlotsShared() bool
}

// SharedSlots is implemented by a store whose slots several processes
// share. Every slot is leased on the store's clock: its holder renews it
// (RenewSlots) while its request runs, and a slot whose lease ran out is
// not counted, so that a holder killed or cut off from the store frees its
// slots within one lease. Every call is one round trip (which a driver may
// share with concurrent calls, as Redis pipelines them), bounded by the
// store's own timeout as well as ctx; a failed call fails the request
// closed (503), never an unchecked pass.
type SharedSlots interface {
	Slots
	// AcquireSlot takes one of limit slots of key for the holder id
	// (unique per request: a random id), leased for lease: ok is false,
	// and nothing changes, when limit slots of key are held by live
	// leases. held is how many live slots key has after the call, id's
	// included if taken. Acquires of one key are serialized by the
	// store, whichever process sends them: of limit+k concurrent
	// acquires of a key that holds none, exactly limit succeed. On an
	// error the slot may or may not have been taken: the caller releases
	// id (ReleaseSlot), and its lease frees it if that fails too.
	AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (ok bool, held int64, err error)
	// ReleaseSlot gives id's slot of key back. Releasing a slot that is
	// not held (expired, released, never taken) is not an error.
	ReleaseSlot(ctx context.Context, key, id string) error
	// RenewSlots extends the lease of every slot in held to lease from
	// now, on the store's clock, in one round trip (one statement, one
	// pipeline). A slot whose lease has already run out is not taken
	// again (another holder may have its place): lost counts those.
	RenewSlots(ctx context.Context, held []SlotRef, lease time.Duration) (lost int, err error)
}

// SlotRef names one held slot: its key and its holder's id.
type SlotRef struct {
	Key string
	ID  string
}
