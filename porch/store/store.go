package store

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch/internal/lifecycle"
)

// Errors returned by a Store.
var (
	// ErrClosed is returned by writes queued after Close has begun. It is
	// the same value as porch.ErrClosed, so one errors.Is catches a request
	// refused by the pool or by the store.
	ErrClosed = lifecycle.ErrClosed
	// ErrWriteFailed is returned by Reservation.Exec or Reservation.Save
	// when one of the owner's own statements failed (a constraint, a bad
	// query): its transaction was rolled back, so neither its writes nor its
	// response were stored. The statement's error is wrapped with it.
	ErrWriteFailed = errors.New("store: the owner's write failed; nothing was stored")
	// ErrExecBudget is wrapped, with ErrWriteFailed, in the error of an
	// owner's statement that SQLite interrupted because it ran past
	// Options.ExecBudget.
	ErrExecBudget = errors.New("store: the statement ran past its time budget (store.Options.ExecBudget) and was interrupted")
	// ErrReleased is returned by a Reservation's methods after Save or
	// Release has ended it.
	ErrReleased = errors.New("store: reservation already ended")
	// ErrNoKeyConn is returned by a shared store's Reserve (PostgreSQL's)
	// when every connection kept for holding idempotency keys is in use.
	// The middleware answers 503 with Retry-After: waiting for a connection
	// would let in-flight keys starve each other, and the handler must not
	// run unreserved.
	ErrNoKeyConn = errors.New("store: no connection free to hold an idempotency key")
)

// Counter is one client key's count within one fixed window. Times are on the
// store's timeline (see [ExclusiveCounters.Now]).
type Counter struct {
	Key         string
	WindowStart time.Time
	Window      time.Duration
	Count       int64
}

// End is when the counter's window closes.
func (c Counter) End() time.Time { return c.WindowStart.Add(c.Window) }

// Hit is the result of counting one request in a shared counter.
type Hit struct {
	// Count is the window's count with this request's weight added: 1 for
	// a first request of weight 1. The request was counted exactly when
	// Count <= the limit; a refused request's Count is what it would have
	// made the count, and is not stored.
	Count int64
	// ResetIn is the time left in the window when the hit was counted,
	// measured on the database's clock.
	ResetIn time.Duration
	// WindowStart is when the window the hit was counted in opened, on the
	// database's clock. It names that window to [SharedCounters.TakeBack],
	// so that a hit taken back late never comes out of a newer window.
	WindowStart time.Time
}

// Response is a stored idempotent response: what the handler answered for the
// request whose digest is Digest. The status, content type and body are
// kept, and only the headers the middleware chose (idem.Options.KeepHeaders):
// replaying a stored Set-Cookie or Date would be wrong.
type Response struct {
	Key         string
	Digest      []byte // SHA-256 of method, path with query, and the body's fingerprint
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

// Stats are a store's commit counters since it opened.
type Stats struct {
	Commits int64 // transactions committed
	Writes  int64 // writes those transactions carried, before collapsing
	Failed  int64 // transactions that failed; their writes' callers got the error
}

// MeanBatch is the mean number of writes per commit.
func (s Stats) MeanBatch() float64 {
	if s.Commits == 0 {
		return 0
	}
	return float64(s.Writes) / float64(s.Commits)
}

// Store is the durable side of porch's middlewares. Actors own serialization
// and volatile state; a Store owns durability. No middleware runs SQL itself.
//
// Besides these methods a Store implements exactly one of
// [ExclusiveCounters] (it is the only writer of its rows, so a limiter may
// keep an exact in-memory view) and [SharedCounters] (several processes write
// the same rows, so every hit is one atomic statement).
//
// Queued writes return at once and call done after their transaction has
// committed, with its error if it failed. While the committer's queue is
// full they block, so a slow disk backs up into the pool's mailboxes and
// becomes 503s rather than unbounded memory. done may be nil.
type Store interface {
	// Wall reads the wall clock, for values a client reads.
	Wall() time.Time

	// Reserve makes the caller the only one, across every process sharing
	// the store, that may run key's handler, until Release. Within a
	// process the idempotency actor already guarantees one caller per key;
	// Reserve adds what a shared database needs. It blocks under ctx while
	// another process holds key.
	Reserve(ctx context.Context, key string) (Reservation, error)

	// Health reports whether the store can commit writes now: nil, or an
	// error wrapping ErrUnhealthy and the reason. It is cheap enough to poll:
	// a store that commits often answers from its last commit, an idle one
	// commits one shared probe.
	Health(ctx context.Context) error

	// Stats reports the committer's counters.
	Stats() Stats
	// Close flushes queued writes and closes the database.
	Close(ctx context.Context) error
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
	// ErrWriteFailed and nothing of the owner's is stored. args must not be
	// changed after the call.
	//
	// SQLite runs the statements on the committer's shared connection: it
	// refuses anything but row writes to the application's tables (no
	// schema change, temporary or not, no PRAGMA or ATTACH, no write to
	// porch_* or sqlite_* tables), and interrupts the owner's statements
	// once together they run past Options.ExecBudget (ErrExecBudget).
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
	// Now reads the store's timeline: the wall clock at open, or the newest
	// persisted window start if that is later, advanced by the monotonic
	// clock. Windows are measured on it.
	Now() time.Time
	// LoadCounters calls fn for every counter whose window is still open at
	// now.
	LoadCounters(ctx context.Context, now time.Time, fn func(Counter)) error
	// SaveCounter queues a write-through of c: after its commit c is the
	// newest row of its key that LoadCounters reads (on SQLite, an append
	// to the hit journal). The limiter's Reset is one too: a count of 0
	// in a window starting at the reset.
	SaveCounter(c Counter, done func(error)) error
	// ClaimPolicy records that a limiter counts under p until release; it
	// fails with ErrPolicyConflict while another limiter of p.Name counts
	// under another policy.
	ClaimPolicy(ctx context.Context, p Policy) (release func(), err error)
}

// SharedCounters is implemented by a store that several processes write
// (PostgreSQL). No process may cache a count; each hit is counted by one
// atomic statement, on the database's clock, and is durable before done runs.
type SharedCounters interface {
	// AddHit counts one request of weight n (at least 1) for key in its
	// window of length window, if the window's count plus n is within
	// limit: the count grows by n. A hit that would pass limit is refused
	// and changes nothing, as a refusal does on an exclusive store.
	AddHit(key string, window time.Duration, n, limit int64, done func(Hit, error)) error
	// PeekHit reads key's counter without counting: done gets the count of
	// its open window (0 when it has none, or it has closed) and the time
	// left in it (window when it has none), on the database's clock, as
	// committed when the batch carrying the peek committed.
	PeekHit(key string, window time.Duration, done func(Hit, error)) error
	// ResetHit empties key's open window and starts it over, on the
	// database's clock: count 0, the window's full length left. A key
	// with no open window is left alone; its next hit opens one. done
	// runs once the reset has committed. Hits queued in the same batch
	// are counted after it: none of them has been answered, so either
	// order is one their callers could have seen.
	ResetHit(key string, done func(error)) error
	// TakeBack removes n that AddHit counted for key from the window that
	// opened at windowStart (the Hit's WindowStart), never below zero: a
	// rate.Set gives back the hits of a request another of its limiters
	// refused. If that window has closed, nothing changes. A take-back
	// queued before a hit of the same process is applied before it; one
	// that fails (done gets the error) leaves the count high, which is the
	// safe side for a limiter.
	TakeBack(key string, windowStart time.Time, n int64, done func(error)) error
	// ClaimPolicy records that a limiter counts under p until release, in
	// every instance; it fails with ErrPolicyConflict while a limiter of
	// p.Name counts under another policy, here or in a running instance.
	ClaimPolicy(ctx context.Context, p Policy) (release func(), err error)
}
