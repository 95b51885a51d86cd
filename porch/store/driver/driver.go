// Package driver is the seam between porch's middlewares and the stores
// that keep their state: what a store driver implements, and what
// porch/rate and porch/idem call. An application never calls it; it opens
// a driver (porch/store/sqlite, postgres, redis, memory) and hands the
// store to rate.New, idem.New or kit.Open, which take it as a
// store.Counters or store.Keys: this package's [Counters] and [KeyStore]
// under the names an application reads.
//
// A driver offers the rate limiter's counters ([ExclusiveCounters] or
// [SharedCounters], both [Counters]), idempotency's [KeyStore], the
// in-flight limiter's [Slots] (in the process, or [SharedSlots]), or
// several of them. porch/store/storetest holds the conformance suites a
// driver passes: TestCounters, TestKeys and TestSlots. The errors a driver
// returns that a user may meet ([ErrClosed], [ErrWriteFailed], …) and the
// [Stats] it reports are declared here and exported again by porch/store
// under the same names; the options every driver takes and the commit
// observer are porch/store's.
//
// Like database/sql/driver, it imports nothing of porch above it: a
// driver and porch/store import it, never the other way.
package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch/internal/counter"
)

// Errors a driver returns that only porch's middlewares handle.
var (
	// ErrReleased is returned by a Reservation's methods after Save or
	// Release has ended it.
	ErrReleased = errors.New("store: reservation already ended")
	// ErrNoKeyConn is returned by a shared store's Reserve (PostgreSQL's)
	// when every connection kept for holding idempotency keys
	// (postgres.Options.KeyConns) is in use. The middleware answers 503
	// with Retry-After: waiting for a connection would let in-flight keys
	// starve each other, and the handler must not run unreserved. It is
	// declared here rather than by the driver so that the middleware can
	// tell it apart without importing a driver.
	ErrNoKeyConn = errors.New("store: no connection free to hold an idempotency key")
	// ErrAlgorithm is returned by a shared store for a Rule whose
	// algorithm it has no statements for; ClaimPolicy returns it too, so
	// that rate.New fails before any request is counted.
	ErrAlgorithm = errors.New("store: the driver does not implement this rate-limit algorithm")
)

// State is one client key's state under its limiter's [Rule], in the
// shape every algorithm shares: what was counted since Start, and what the
// window before it counted. A store keeps it verbatim; only the Rule gives
// it meaning. Times are on the store's timeline (see
// [ExclusiveCounters.Now]) or, for a shared store, the server's clock. Its
// fields are documented in porch/internal/counter, where it is declared
// so that the algorithms need not import this package.
type State = counter.State

// Rule is a limiter's algorithm with its policy: how a key's [State]
// moves with time and how much weight it admits. Each of porch/rate's
// algorithms implements it; a shared store applies it to the states it
// reads, so that the database and the limiter decide alike, and carries
// out Advance in its own statements (a driver's statements per
// algorithm, named by Algorithm). Its methods are documented in
// porch/internal/counter.
type Rule = counter.Rule

// Counter is one client key's stored state: what an exclusive store
// persists and loads back. Its fields and methods are documented in
// porch/internal/counter.
type Counter = counter.Counter

// Hit is the result of counting one request in a shared counter.
type Hit struct {
	// Allowed reports whether the request was counted: its weight fits the
	// Room of the key's state. A refused request changes nothing.
	Allowed bool
	// State is the key's state after the hit, advanced to Now, with the
	// hit's weight counted in it if Allowed. Its Start names the epoch
	// the hit was counted in to [SharedCounters.TakeBack], so that a hit
	// taken back late never comes out of a newer one.
	State State
	// Now is the database's clock when the hit was decided.
	Now time.Time
}

// Response is a stored idempotent response: what the handler answered for the
// request whose digest is Digest. The status, content type and body are
// kept, and only the headers the middleware chose (idem.Options.KeepHeaders):
// replaying a stored Set-Cookie or Date would be wrong.
type Response struct {
	Key         string
	Digest      []byte // opaque to the store: idem's SHA-256 of method, path with query and the body's fingerprint, and possibly a hint after it
	Status      int
	ContentType string
	Body        []byte
	// Header holds the kept headers other than Content-Type, under valid
	// field names; nil when none were kept, as for every row stored before
	// the column existed.
	Header  http.Header
	Created time.Time // set by the store
	Expires time.Time // set by the store
}

// Store is what every driver offers: the durable side of porch's
// middlewares. Actors own serialization and volatile state; a store owns
// durability. No middleware runs SQL itself.
//
// A driver offers the rate limiter's counters ([ExclusiveCounters] or
// [SharedCounters], both [Counters]), idempotency's [KeyStore], or both: a
// store that cannot commit a handler's writes with its response (Redis)
// offers only counters, so passing it to idem.New does not compile.
//
// Queued writes return at once and call done after their transaction has
// committed, with its error if it failed. done runs exactly once when the
// call returns nil, and never when it returns an error: the caller reuses
// what done answers into, so a second call would answer another request.
// While the committer's queue is full they block, so a slow disk backs up
// into the pool's mailboxes and becomes 503s rather than unbounded memory.
// done may be nil.
type Store interface {
	// Wall reads the wall clock, for values a client reads.
	Wall() time.Time

	// Health reports whether the store can commit writes now: nil, or an
	// error wrapping [ErrUnhealthy] and the reason. It is cheap enough to poll:
	// a store that commits often answers from its last commit, an idle one
	// commits one shared probe.
	Health(ctx context.Context) error

	// Stats reports the committer's counters.
	Stats() Stats
	// Close flushes queued writes and closes the database.
	Close(ctx context.Context) error
}

// KeyStore is what the idempotency middleware needs of a store: an exclusive
// hold on a key, and a transaction the owner's writes and its response
// commit in together.
type KeyStore interface {
	Store
	// Reserve makes the caller the only one, across every process sharing
	// the store, that may run key's handler, until Release. Within a
	// process the idempotency actor already guarantees one caller per key;
	// Reserve adds what a shared database needs. It blocks under ctx while
	// another process holds key; a store that bounds that wait fails with
	// [ErrKeyHeld] past its bound.
	Reserve(ctx context.Context, key string) (Reservation, error)
	// Inspect reads key's stored response for a support tool, without
	// waiting for the key: ok is false when none is stored or it has
	// expired. It fails with [ErrKeyHeld] while an owner holds key.
	Inspect(ctx context.Context, key string) (r Response, ok bool, err error)
	// Forget deletes key's stored response, if any, and returns once the
	// deletion is durable, so that the key's next request runs its
	// handler. It fails with [ErrKeyHeld], deleting nothing, while an owner
	// holds key.
	Forget(ctx context.Context, key string) error
}

// Counters is what the rate limiter needs of a store, besides exactly one
// of [ExclusiveCounters] (the process is the only writer of its rows, so
// a limiter may keep an exact in-memory view) and [SharedCounters]
// (several processes write the same rows, so every hit is decided in the
// database). porch/store/storetest is the suite a driver's counters pass.
type Counters interface {
	Store
	// ClaimPolicy records that a limiter counts under p until release; it
	// fails with [ErrPolicyConflict] while a limiter of p.Name counts under
	// another policy: in this process, or, for a shared store, in any
	// running instance.
	ClaimPolicy(ctx context.Context, p Policy) (release func(), err error)
}

// Reservation is a held idempotency key and the owner's transaction: the
// statements its handler runs through Exec and the response it saves commit
// together, or not at all. Its methods are safe for concurrent use, but a
// handler normally calls them from its own goroutine.
type Reservation interface {
	// Load returns key's stored response if one exists and has not expired.
	// An expired row is pruned.
	Load(ctx context.Context) (r Response, ok bool, err error)
	// Exec runs one of the owner's writes in the transaction Save commits.
	// Whether it runs now or at Save is the store's choice: PostgreSQL
	// runs it now on the owner's transaction and returns its error;
	// SQLite queues it for the committer and reports its failure from
	// Save. Either way a failed statement makes Save fail with
	// [ErrWriteFailed] and nothing of the owner's is stored. args must not be
	// changed after the call.
	//
	// SQLite runs the statements on the committer's shared connection: it
	// refuses anything but row writes to the application's tables (no
	// schema change, temporary or not, no PRAGMA or ATTACH, no write to
	// porch_* or sqlite_* tables), holds each step to bounded values (see
	// sqlite.Store.Exec), and fails the owner's statements once together
	// they run past sqlite.Options.ExecBudget (sqlite.ErrExecBudget). SQLite cannot
	// interrupt a step, so a statement whose one step runs long (a
	// function of two long values, a row of many expressions over large
	// values) still holds up the process's writes until it fails; see
	// sqlite.Store.Exec.
	Exec(ctx context.Context, query string, args ...any) error
	// Save stores r for ttl together with the owner's writes, and returns
	// once they are durable. It ends the reservation.
	Save(ctx context.Context, r Response, ttl time.Duration) error
	// Release gives the key up, discarding the owner's writes if Save has
	// not committed them. It is safe to call more than once.
	Release()
}

// ExclusiveCounters is implemented by a store whose process is the only
// writer of its counters (SQLite). The limiter keeps each key's count in its
// actor's memory and writes the new count through.
type ExclusiveCounters interface {
	Counters
	// Now reads the store's timeline: the wall clock at open, or the newest
	// persisted window start if that is later, advanced by the monotonic
	// clock. Windows are measured on it.
	Now() time.Time
	// LoadCounters calls fn for every counter whose window is still open at
	// now.
	LoadCounters(ctx context.Context, now time.Time, fn func(Counter)) error
	// SaveCounter queues a write-through of c: after its commit c is the
	// newest row of its key that LoadCounters reads (on SQLite, an append
	// to the hit journal), until c.End(). The limiter's Reset is one too:
	// a count of 0 in a window starting at the reset.
	SaveCounter(c Counter, done func(error)) error
}

// SharedCounters is implemented by a store that several processes write
// (PostgreSQL, Redis). No process may cache a state; each hit is decided
// by one atomic step of the store, on its clock, and is durable (as far as
// the store can make it) before done runs.
type SharedCounters interface {
	Counters
	// AddHit decides one request of weight n (at least 1) for key under
	// rule: the key's state is advanced to the store's clock and, if n fits
	// its Room, the state's Count grows by n. A hit that does not fit is
	// refused and changes nothing, as a refusal does on an exclusive store.
	// Hits of one key are decided in the order AddHit was called.
	//
	// lease is the zero Lease but for a limiter with leases
	// (rate.Options.Lease): then lease.Held of the weight n is counted
	// ahead, for the caller to answer later from memory, and stays held
	// (see Lease) until it is settled or given back; lease.Settled
	// reports held hits answered since, which stay counted but are held
	// no more, and lease.Adopted hits it took back, to be held from now
	// on. Settlement and adoption stand whether the hit is allowed or
	// not; Held is held only if the hit is allowed.
	AddHit(key string, rule Rule, n int64, lease Lease, done func(Hit, error)) error
	// PeekHit reads key's state without counting: done gets it advanced
	// to the store's clock (Allowed unset), as committed when the batch
	// carrying the peek committed.
	PeekHit(key string, rule Rule, done func(Hit, error)) error
	// ResetHit empties key's state and starts it over, on the store's
	// clock: Start now, Prev 0, and Count the hits leases hold (see
	// Lease), 0 without leases: the callers still holding them may answer
	// them after the reset without asking the store, so they stay counted
	// until given back or the reset's window ends. A key with no live
	// state is left alone; its next hit opens one. done runs once the
	// reset has committed. Hits queued in the same batch are counted after
	// it: none of them has been answered, so either order is one their
	// callers could have seen.
	ResetHit(key string, done func(error)) error
	// TakeBack removes n that AddHit counted for key from the epoch that
	// started at start (the Hit's State.Start), never below zero: a
	// rate.Set gives back the hits of a request another of its limiters
	// refused. If that epoch has ended, nothing changes. A take-back
	// queued before a hit of the same process is applied before it; one
	// that fails (done gets the error) leaves the count high, which is the
	// safe side for a limiter.
	TakeBack(key string, start time.Time, n int64, done func(error)) error
	// GiveBack ends a lease's hold on key's hits counted in the epoch
	// lease.Start: lease.Held hits it never answered come out of the count
	// and the hold, and lease.Settled answered ones out of the hold only,
	// never below zero. It applies while that epoch is key's current one,
	// or one that resets have replaced since (a reset keeps the held hits
	// counted); once a window has closed over it, nothing changes.
	GiveBack(key string, lease Lease, done func(error)) error
}

// Lease is what a limiter's lease (rate.Options.Lease) tells a shared
// store with a hit or a give-back; the zero Lease is a hit without one. A
// key's state holds, beside its count, the hits leases counted ahead and
// may still answer from memory without a round trip: a reset cannot reach
// those answers, so it keeps them counted (see SharedCounters.ResetHit). A
// window that closes ends every hold: a lease answers only within the
// window its hits were counted in.
type Lease struct {
	// Held is the hits counted for the lease (AddHit), or given back
	// unanswered (GiveBack).
	Held int64
	// Settled is the hits held since Start that the lease answered: they
	// stay counted, but are held no more.
	Settled int64
	// Adopted (AddHit) is hits counted in the epoch Start outside any
	// lease that the lease took back to answer later (a request refused
	// after all): held from this hit on if Start is still key's epoch,
	// which the Hit's State.Start then equals; otherwise left as they are
	// (a reset or the window's end has cleared them).
	Adopted int64
	// Start names the epoch Settled's and Adopted's hits, and a
	// give-back's Held, were counted in: their Hit's State.Start.
	Start time.Time
}

// Policy is what a rate limiter counts under: Limit requests per Window, in
// the counter rows of Name.
type Policy struct {
	Name   string
	Limit  int64
	Window time.Duration
	// Algorithm is the Rule's: "fixed" (or "", as stored before there were
	// others), "sliding" or "gcra".
	Algorithm string
	// Burst is GCRA's burst; 0 for the other algorithms.
	Burst int64
}

// Equal reports whether p and q are one policy; an empty Algorithm is
// "fixed".
func (p Policy) Equal(q Policy) bool {
	return p.Name == q.Name && p.Limit == q.Limit && p.Window == q.Window &&
		p.algorithm() == q.algorithm() && p.Burst == q.Burst
}

func (p Policy) algorithm() string {
	if p.Algorithm == "" {
		return "fixed"
	}
	return p.Algorithm
}

// String formats p for errors and logs.
func (p Policy) String() string {
	s := fmt.Sprintf("%q: %d per %s", p.Name, p.Limit, p.Window)
	if a := p.algorithm(); a != "fixed" {
		s += ", " + a
	}
	if p.Burst > 0 {
		s += fmt.Sprintf(", burst %d", p.Burst)
	}
	return s
}
