package store

import (
	"context"
	"errors"
	"time"
)

// Errors returned by a Store.
var (
	// ErrClosed is returned by writes queued after Close has begun.
	ErrClosed = errors.New("store: closed")
)

// Counter is one client key's count within one fixed window. Times are on the
// store's timeline (see [Store.Now]).
type Counter struct {
	Key         string
	WindowStart time.Time
	Window      time.Duration
	Count       int64
}

// End is when the counter's window closes.
func (c Counter) End() time.Time { return c.WindowStart.Add(c.Window) }

// Response is a stored idempotent response: what the handler answered for the
// request whose digest is Digest. Only the status, content type and body are
// kept; replaying a stored Set-Cookie or Date would be wrong.
type Response struct {
	Key         string
	Digest      []byte // SHA-256 of method, path with query, and body
	Status      int
	ContentType string
	Body        []byte
	Created     time.Time
	Expires     time.Time
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
// Writes (SaveCounter, SaveResponse, DeleteResponse) are queued for the
// committer and return at once; done runs after the write's transaction has
// committed, with its error if it failed. When the committer's queue is full
// they block until it has room, so a slow disk backs up into the pool's
// mailboxes and becomes 503s rather than unbounded memory. done may be nil.
type Store interface {
	// Now reads the store's timeline: the wall clock at open, or the newest
	// persisted time if that is later, advanced by the monotonic clock.
	Now() time.Time
	// Wall reads the wall clock, for values a client reads.
	Wall() time.Time

	// LoadCounters calls fn for every counter whose window is still open at
	// now. A limiter that is its keys' only writer loads them once at start.
	LoadCounters(ctx context.Context, now time.Time, fn func(Counter)) error
	// SaveCounter writes c through: an upsert, never delete then insert.
	SaveCounter(c Counter, done func(error)) error

	// LoadResponse returns the stored response for key, if any. ok is false
	// when there is none; an expired row is returned with its Expires so the
	// caller can treat it as absent and prune it.
	LoadResponse(ctx context.Context, key string) (r Response, ok bool, err error)
	// SaveResponse stores r, replacing any expired row for its key.
	SaveResponse(r Response, done func(error)) error
	// DeleteResponse prunes key's row if it has expired by the time the
	// committer runs.
	DeleteResponse(key string, now time.Time, done func(error)) error

	// Stats reports the committer's counters.
	Stats() Stats
	// Close flushes queued writes and closes the database.
	Close(ctx context.Context) error
}
