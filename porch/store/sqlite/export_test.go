package sqlite

import (
	"context"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// The black-box tests read and write idempotent responses directly, below
// the Reservation that middleware goes through.

// LoadResponse reads key's stored response, expired or not.
func (s *Store) LoadResponse(ctx context.Context, key string) (driver.Response, bool, error) {
	return s.loadResponse(ctx, key)
}

// SaveResponse queues an upsert of r, outside any reservation.
func (s *Store) SaveResponse(r driver.Response, done func(error)) error {
	return s.c.Enqueue(commit.Op{Response: &r, Done: done})
}

// DeleteResponse queues the prune of key's row if it has expired at now.
func (s *Store) DeleteResponse(key string, now time.Time, done func(error)) error {
	return s.deleteResponse(key, now, done)
}
