// Package pgstore opens porch's PostgreSQL store for a test, on a DSN
// from internal/pgtest:
//
//	st := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
//
// It is apart from pgtest because porch/store/postgres's own
// package-internal tests use pgtest, and pgtest importing the store would
// make an import cycle of them; those tests open their store themselves.
// Like pgtest, it is imported only from _test.go files and the acceptance
// gate.
package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/postgres"
)

// openTimeout bounds Open's connect and migration, and the Close at the
// end of the test: a healthy local server takes milliseconds, and a test
// beside busy loops on a loaded machine is given far more.
const openTimeout = 20 * time.Second

// Open opens the store on dsn with opt, failing tb if it cannot within
// openTimeout, and closes it when tb ends, reporting an error from Close.
// Cleanups run last first, so one a test registers after Open (a pool,
// a server in front of the store) runs before the store closes.
func Open(tb testing.TB, dsn string, opt postgres.Options) *postgres.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, opt)
	if err != nil {
		tb.Fatalf("postgres.Open: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		if err := st.Close(ctx); err != nil {
			tb.Errorf("close postgres: %v", err)
		}
	})
	return st
}
