package store

import "github.com/writeonce/porch-go/porch/store/driver"

// Counters is any store that can hold a rate limiter's counters:
// *sqlite.Store, *postgres.Store, *redis.Store and *memory.Store.
// rate.New, kit.New and kit.Open take it. An application only opens a
// store and passes it on; its methods are what a store driver implements
// (porch/store/driver), and are not for calling.
type Counters = driver.Counters

// Keys is any store that can hold idempotency keys: *sqlite.Store,
// *postgres.Store and *memory.Store. idem.New, kit.New and kit.Open take
// it. *redis.Store is not one: Redis cannot commit a handler's writes
// with its response, so passing it where Keys are taken does not
// compile. As with [Counters], its methods are a driver's, not for
// calling.
type Keys = driver.KeyStore

// Slots is any store that can hold the in-flight limiter's slots:
// *sqlite.Store and *memory.Store count them in the process,
// *postgres.Store and *redis.Store across every instance sharing them.
// inflight.New takes it. As with [Counters], its methods are a driver's,
// not for calling.
type Slots = driver.Slots

// Errors a store returns that an application may meet.
var (
	// ErrClosed is returned by writes queued after Close has begun. It is
	// the same value as porch.ErrClosed, so one errors.Is catches a request
	// refused by the pool or by the store.
	ErrClosed = driver.ErrClosed
	// ErrWriteFailed is returned by a reservation's Exec or Save (idem.Exec, for a handler)
	// when one of the owner's own statements failed (a constraint, a bad
	// query): its transaction was rolled back, so neither its writes nor its
	// response were stored. The statement's error is wrapped with it.
	ErrWriteFailed = driver.ErrWriteFailed
	// ErrKeyHeld is returned by a store's Inspect and Forget (through
	// idem's Lookup and Forget) while an owner, in any process sharing the
	// store, holds the key: its response is not known yet, and must not be
	// forgotten under it. A shared store's Reserve returns it when the key
	// was not free within the store's bound (postgres.Options.Timeout);
	// idem answers that request 409, in flight.
	ErrKeyHeld = driver.ErrKeyHeld
)

// Stats are a store's commit counters since it opened: Commits,
// transactions committed; Writes, the writes those transactions carried,
// before collapsing; Failed, transactions that failed (their writes'
// callers got the error).
type Stats = driver.Stats
