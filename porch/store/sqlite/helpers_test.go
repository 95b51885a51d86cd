package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

var wall0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// dbPath is a fresh database file in the test's temporary directory.
func dbPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "porch.db")
}

// openSQLite opens path and closes it when the test ends unless the test closed
// it first with closeStore.
func openSQLite(t *testing.T, path string, opt sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, opt)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// closeStore closes s, flushing its queue, and fails the test on error.
func closeStore(t *testing.T, s *sqlite.Store) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// saveCounter writes c and returns the error its done callback received.
func saveCounter(t *testing.T, s *sqlite.Store, c driver.Counter) error {
	t.Helper()
	done := make(chan error, 1)
	if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
		t.Fatalf("queue counter %q: %v", c.Key, err)
	}
	return <-done
}

// mustSaveCounter writes c and fails the test if the commit failed.
func mustSaveCounter(t *testing.T, s *sqlite.Store, c driver.Counter) {
	t.Helper()
	if err := saveCounter(t, s, c); err != nil {
		t.Fatalf("save counter %q: %v", c.Key, err)
	}
}

// holdCommitter commits a write whose done callback blocks until release is
// called, so the committer is parked between batches: everything queued
// meanwhile is drained into the next batch. release is idempotent and also
// runs at cleanup.
func holdCommitter(t *testing.T, s *sqlite.Store) (release func()) {
	t.Helper()
	held, unblock := make(chan error, 1), make(chan struct{})
	c := driver.Counter{Key: "hold", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
	if err := s.SaveCounter(c, func(err error) { held <- err; <-unblock }); err != nil {
		t.Fatalf("queue hold write: %v", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("hold write: %v", err)
	}
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	return release
}

// counterRow reads key's counter row through db.
func counterRow(t *testing.T, db *sql.DB, key string) (count, windowStart int64, ok bool) {
	t.Helper()
	err := db.QueryRow(`SELECT count, window_start FROM porch_rate_current WHERE key = ?`, key).
		Scan(&count, &windowStart)
	if err == sql.ErrNoRows {
		return 0, 0, false
	}
	if err != nil {
		t.Fatalf("read counter %q: %v", key, err)
	}
	return count, windowStart, true
}

// countRows runs a count(*) query through db.
func countRows(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// execSQL runs SQL through db, for test fixtures such as triggers.
func execSQL(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// fakeClock starts a fake clock at wall0.
func fakeClock() *porchtest.FakeClock { return porchtest.NewFakeClock(wall0) }
