//go:build cgo

package sqlite

import (
	"context"
	"fmt"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Health reports whether the store can commit: nil while it can, else an
// error wrapping store.ErrUnhealthy and the reason (or store.ErrClosed, or
// ctx.Err()). It answers from the last commit's outcome when that is under
// a second old; an idle store commits one small probe instead,
// shared by every caller meanwhile and waited for at most
// a second. It is cheap enough for an unlimited health endpoint.
func (s *Store) Health(ctx context.Context) error { return s.c.Check(ctx) }

// writeProbe runs on the committer, inside a batch's transaction.
func (s *Store) writeProbe(ctx context.Context) error {
	for _, q := range commit.ProbeSQL {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlite: health probe: %w", err)
		}
	}
	return nil
}
