//go:build cgo

package sqlite

import (
	"context"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// ClaimPolicy records that a limiter counts under p until release is called
// (Limiter.Close does), and fails with store.ErrPolicyConflict while
// another limiter of the same name counts in this store, under any policy.
// A limiter on this store keeps its counts in its own memory and writes
// them through, so two of one name would each count apart and overwrite
// each other's rows: a client got a limit of 5 on each of two routes, and
// after a restart whichever limiter wrote last. One process writes a
// SQLite file, so the check is within the process; a policy changed across
// a restart is a deploy, and the limiter decides what open windows do.
func (s *Store) ClaimPolicy(_ context.Context, p driver.Policy) (release func(), err error) {
	return s.claims.ClaimAlone(p, "on SQLite")
}
