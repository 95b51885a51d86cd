package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

var journalWall = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// openJournalStore opens a store at path on clock with the journal cleaned
// from minRows rows on.
func openJournalStore(t *testing.T, path string, clk clock.Clock, minRows int) *Store {
	t.Helper()
	s, err := Open(path, Options{Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	// Before any write: the committer reads it only after a send on its
	// queue.
	s.jr.minRows, s.jr.cleanAt = minRows, minRows
	return s
}

// crash stops s the way kill -9 would leave the file: every committed
// write in place, no Close fold.
func crash(t *testing.T, s *Store) {
	t.Helper()
	s.c.Close(context.Background())
	if err := s.closeDB(); err != nil {
		t.Fatalf("close db: %v", err)
	}
	s.unlock()
}

// save writes cs, each in a commit of its own.
func save(t *testing.T, s *Store, cs ...driver.Counter) {
	t.Helper()
	for _, c := range cs {
		done := make(chan error, 1)
		if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("save %q: %v", c.Key, err)
		}
	}
}

// saveBatch queues cs at once, so that they share commits, and waits.
func saveBatch(t *testing.T, s *Store, cs ...driver.Counter) {
	t.Helper()
	done := make(chan error, len(cs))
	for _, c := range cs {
		if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range cs {
		if err := <-done; err != nil {
			t.Fatalf("save: %v", err)
		}
	}
}

// loaded is what LoadCounters rebuilds: key → count.
func loaded(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	got := make(map[string]int64)
	err := s.LoadCounters(context.Background(), s.Now(), func(c driver.Counter) {
		if _, dup := got[c.Key]; dup {
			t.Errorf("LoadCounters: key %q twice", c.Key)
		}
		got[c.Key] = c.Count
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func journalRows(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.db.Query(`SELECT key, count FROM porch_rate_journal ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var key string
		var n int64
		if err := rows.Scan(&key, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%d", key, n))
	}
	return got
}

func tableCount(t *testing.T, s *Store, query string) int {
	t.Helper()
	return countOf(t, s.db, query)
}

func countOf(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// After a crash only the journal holds the counts; the restart rebuilds
// the newest bound of every open window, as a clean stop does.
func TestJournalRecoveryAfterCrash(t *testing.T) {
	writes := func(start time.Time) []driver.Counter {
		return []driver.Counter{
			{Key: "a", State: driver.State{Start: start, Count: 1}, Window: time.Hour},
			{Key: "b", State: driver.State{Start: start, Count: 1}, Window: time.Minute},
			{Key: "a", State: driver.State{Start: start, Count: 3}, Window: time.Hour},
			{Key: "c", State: driver.State{Start: start.Add(-59 * time.Second), Count: 9}, Window: time.Minute}, // closes in 1 s
			{Key: "b", State: driver.State{Start: start, Count: 7}, Window: time.Minute},
			{Key: "a", State: driver.State{Start: start, Count: 7}, Window: time.Hour},
		}
	}
	want := map[string]int64{"a": 7, "b": 7}
	views := make(map[string]map[string]int64)
	for _, stop := range []string{"crash", "clean"} {
		t.Run(stop, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "porch.db")
			clock := porchtest.NewFakeClock(journalWall)
			s := openJournalStore(t, path, clock, journalMinRows)
			save(t, s, writes(s.Now())...)
			clock.Advance(2 * time.Second)
			if stop == "crash" {
				crash(t, s)
			} else if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			s = openJournalStore(t, path, porchtest.NewFakeClock(journalWall.Add(2*time.Second)), journalMinRows)
			defer s.Close(context.Background())
			got := loaded(t, s)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after a %s stop: LoadCounters got %v, want %v", stop, got, want)
			}
			views[stop] = got
		})
	}
	if !reflect.DeepEqual(views["crash"], views["clean"]) {
		t.Errorf("crash view %v, clean view %v: want the same", views["crash"], views["clean"])
	}
}

// The cleaner drops superseded and expired rows and moves each live key's
// newest row to the tail.
func TestJournalCleanKeepsNewestLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	clock := porchtest.NewFakeClock(journalWall)
	s := openJournalStore(t, path, clock, 5)
	start := s.Now()
	save(t, s,
		driver.Counter{Key: "a", State: driver.State{Start: start, Count: 1}, Window: time.Hour},
		driver.Counter{Key: "a", State: driver.State{Start: start, Count: 2}, Window: time.Hour},
		driver.Counter{Key: "b", State: driver.State{Start: start, Count: 1}, Window: time.Minute},
		driver.Counter{Key: "c", State: driver.State{Start: start, Count: 1}, Window: time.Hour},
	)
	if got, want := journalRows(t, s), []string{"a=1", "a=2", "b=1", "c=1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("journal before cleaning: got %v, want %v", got, want)
	}
	clock.Advance(2 * time.Minute) // b's window has closed
	save(t, s, driver.Counter{Key: "d", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour})

	if got, want := journalRows(t, s), []string{"a=2", "c=1", "d=1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("journal after cleaning: got %v, want %v", got, want)
	}
	if got, want := len(s.jr.latest), 3; got != want {
		t.Errorf("latest: got %d keys %v, want %d", got, s.jr.latest, want)
	}
	crash(t, s)
	s = openJournalStore(t, path, porchtest.NewFakeClock(journalWall.Add(2*time.Minute)), 5)
	defer s.Close(context.Background())
	if got, want := loaded(t, s), map[string]int64{"a": 2, "c": 1, "d": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a crash: LoadCounters got %v, want %v", got, want)
	}
}

// A sustained stream of fresh keys, and a few keys written again and
// again, leave a journal whose size follows the live keys, not the writes.
func TestJournalBoundedGrowth(t *testing.T) {
	const minRows, rounds, perRound = 64, 150, 10
	tests := []struct {
		name    string
		write   func(s *Store, round, i int) driver.Counter
		advance time.Duration
	}{
		{"fresh keys, short windows", func(s *Store, round, i int) driver.Counter {
			return driver.Counter{Key: fmt.Sprintf("k%d-%d", round, i), State: driver.State{Start: s.Now(), Count: 1}, Window: 5 * time.Second}
		}, time.Second},
		{"hot keys", func(s *Store, round, i int) driver.Counter {
			return driver.Counter{Key: fmt.Sprintf("hot%d", i%3), State: driver.State{Start: journalWall, Count: int64(round*perRound + i + 1)}, Window: time.Hour}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := porchtest.NewFakeClock(journalWall)
			s := openJournalStore(t, filepath.Join(t.TempDir(), "porch.db"), clock, minRows)
			defer s.Close(context.Background())
			peak := 0
			for round := range rounds {
				cs := make([]driver.Counter, perRound)
				for i := range cs {
					cs[i] = tt.write(s, round, i)
				}
				saveBatch(t, s, cs...)
				clock.Advance(tt.advance)
				peak = max(peak, tableCount(t, s, `SELECT count(*) FROM porch_rate_journal`))
			}
			// Live keys are at most 6 rounds' worth (60) here; the
			// journal may hold twice that, plus what it waits for.
			if bound := 2*minRows + 4*perRound; peak > bound {
				t.Errorf("journal peaked at %d rows after %d appends, want at most %d", peak, rounds*perRound, bound)
			}
		})
	}
}

// Close folds the journal completely: the table holds the exact newest
// count of every open window and the journal is empty.
func TestJournalCloseFoldsExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	clock := porchtest.NewFakeClock(journalWall)
	s := openJournalStore(t, path, clock, 4)
	start := s.Now()
	var cs []driver.Counter
	for n := int64(1); n <= 20; n++ {
		cs = append(cs, driver.Counter{Key: fmt.Sprintf("k%d", n%5), State: driver.State{Start: start, Count: n}, Window: time.Hour})
	}
	cs = append(cs, driver.Counter{Key: "gone", State: driver.State{Start: start.Add(-time.Hour), Count: 3}, Window: time.Minute})
	save(t, s, cs...)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Read the file as Close left it.
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := countOf(t, db, `SELECT count(*) FROM porch_rate_journal`); n != 0 {
		t.Errorf("journal after Close: got %d rows, want 0 (folded)", n)
	}
	got := make(map[string]int64)
	rows, err := db.Query(`SELECT key, count, expires_at - window_start - window_ms FROM porch_rate_counters`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key string
		var n, skew int64
		if err := rows.Scan(&key, &n, &skew); err != nil {
			t.Fatal(err)
		}
		if skew != 0 {
			t.Errorf("row %q: expires_at is window_start + window_ms %+d, want +0", key, skew)
		}
		got[key] = n
	}
	rows.Close()
	want := map[string]int64{"k0": 20, "k1": 16, "k2": 17, "k3": 18, "k4": 19}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows Close left: got %v, want %v (the newest count of each open window)", got, want)
	}
}

// A batch that fails leaves the journal's bookkeeping as it was: were the
// rolled-back row taken for a's newest, the cleaner would drop the row that
// is.
func TestJournalFailedBatchKeepsBookkeeping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	s := openJournalStore(t, path, porchtest.NewFakeClock(journalWall), 3)
	start := s.Now()
	save(t, s, driver.Counter{Key: "a", State: driver.State{Start: start, Count: 1}, Window: time.Hour})
	if _, err := s.db.Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		WHEN NEW.key = 'bad' BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	// Park the committer in a write's callback, so that a=2 and the bad
	// write are drained into one batch, after a's append.
	parked, unpark := make(chan struct{}), make(chan struct{})
	if err := s.SaveCounter(driver.Counter{Key: "hold", State: driver.State{Start: start, Count: 1}, Window: time.Hour}, func(error) {
		close(parked)
		<-unpark
	}); err != nil {
		t.Fatal(err)
	}
	<-parked
	done := make(chan error, 2)
	for _, key := range []string{"a", "bad"} {
		if err := s.SaveCounter(driver.Counter{Key: key, State: driver.State{Start: start, Count: 2}, Window: time.Hour}, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	close(unpark)
	for range 2 {
		if err := <-done; err == nil {
			t.Fatal("a write of the refused batch: got nil, want its error")
		}
	}
	if _, err := s.db.Exec(`DROP TRIGGER boom`); err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // enough to clean the head, a's row included
		save(t, s, driver.Counter{Key: fmt.Sprintf("k%d", i), State: driver.State{Start: start, Count: 1}, Window: time.Hour})
	}
	crash(t, s)
	s = openJournalStore(t, path, porchtest.NewFakeClock(journalWall), 3)
	defer s.Close(context.Background())
	if got := loaded(t, s)["a"]; got != 1 {
		t.Errorf("a after the failed batch and cleaning: got count %d, want 1", got)
	}
}

// A burst of keys seen once, whose windows then close, is swept by the few
// commits of the trickle that follows: once a slice of the head turns out
// dead, the next is a full one. (At 66 rows a commit, 5,000 expired rows
// and their entries in latest outlived their windows by 75 commits.)
func TestJournalSweepsAnExpiredBurst(t *testing.T) {
	const burst, trickle = 5000, 8
	clock := porchtest.NewFakeClock(journalWall)
	s := openJournalStore(t, filepath.Join(t.TempDir(), "porch.db"), clock, 64)
	defer s.Close(context.Background())
	cs := make([]driver.Counter, burst)
	for i := range cs {
		cs[i] = driver.Counter{Key: fmt.Sprintf("once%d", i), State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute}
	}
	saveBatch(t, s, cs...)
	clock.Advance(2 * time.Minute) // every burst window has closed
	for i := range trickle {
		save(t, s, driver.Counter{Key: "steady", State: driver.State{Start: s.Now(), Count: int64(i + 1)}, Window: time.Hour})
	}
	if rows := tableCount(t, s, `SELECT count(*) FROM porch_rate_journal`); rows > burst/10 {
		t.Errorf("after %d commits of one write: %d journal rows left of a burst of %d expired ones, want at most %d", trickle, rows, burst, burst/10)
	}
	if got := len(s.jr.latest); got > burst/10 {
		t.Errorf("after %d commits: %d keys still in latest, want at most %d", trickle, got, burst/10)
	}
}
