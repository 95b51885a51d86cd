package sqlite

import (
	"context"

	"github.com/writeonce/porch-go/porch/store"
)

// ClaimPolicy records that a limiter counts under p until release is called
// (Limiter.Close does), and fails with store.ErrPolicyConflict while a
// limiter of the same name and another policy counts in this store. One
// process writes a SQLite file, so the check is within the process; a
// policy changed across a restart is a deploy, and the limiter decides what
// open windows do.
func (s *Store) ClaimPolicy(_ context.Context, p store.Policy) (release func(), err error) {
	_, release, err = s.claims.Claim(p)
	return release, err
}
