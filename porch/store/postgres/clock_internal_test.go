package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// A batch's clock is its transaction's start (now()), but its rows may be
// locked by another instance's transaction that started later and opened a
// new window (or GCRA epoch) at that later clock. The batch that waited
// must not settle its hits at a clock before the window it counts in: GCRA
// would owe one interval more than it does and report one remaining fewer,
// so that two instances hand out one remaining count twice (and skip one).
// The test holds the key's row, lets a hit's transaction start and queue
// behind it, then opens a new epoch at a later clock, as another instance
// would.
func TestLockWaitDoesNotTurnTheClockBack(t *testing.T) {
	for _, alg := range []algorithm.Algorithm{algorithm.Fixed, algorithm.Sliding, algorithm.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			dsn := pgtest.DSN(t)
			app := "porch-clock-test-" + alg.Name()
			p := openInternal(t, pgtest.WithParam(dsn, "application_name", app), Options{})
			const limit = 100
			burst := int64(0)
			if alg == algorithm.GCRA {
				burst = limit
			}
			rule := algorithm.MustRule(alg, limit, time.Hour, burst)
			key := "rate:t:clock:" + alg.Name()
			if h := hitNow(t, p, key, rule); !h.Allowed {
				t.Fatalf("first hit refused: %+v", h)
			}

			ctx := context.Background()
			locker := connectDSN(t, dsn)
			tx, err := locker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM porch_rate_counters WHERE key = $1 FOR UPDATE`, dbKey(key)); err != nil {
				t.Fatal(err)
			}

			got := make(chan driver.Hit, 1)
			if err := p.AddHit(key, rule, 1, driver.Lease{}, func(h driver.Hit, err error) {
				if err != nil {
					t.Error(err)
				}
				got <- h
			}); err != nil {
				t.Fatal(err)
			}

			// The hit's transaction has started and waits for the row,
			// as a connection of its own sees: the locker's transaction
			// would see pg_stat_activity as it was at its first read.
			watcher := connectDSN(t, dsn)
			var started time.Time
			waitWithin(t, 10*time.Second, "the hit to wait for the row's lock", func() bool {
				err := watcher.QueryRow(ctx, `SELECT xact_start FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND application_name = $1`, app).Scan(&started)
				return err == nil
			})
			// Another instance's transaction, started later, opens a new
			// window at its own clock: at least 2 ms after the waiting one's.
			waitWithin(t, 10*time.Second, "the clock to pass the waiting transaction's start", func() bool {
				var past bool
				err := tx.QueryRow(ctx, `SELECT clock_timestamp() >= $1::timestamptz + interval '2 ms'`, started).Scan(&past)
				return err == nil && past
			})
			var openedMS int64
			if err := tx.QueryRow(ctx, `UPDATE porch_rate_counters
				SET window_start = `+pgClockMS+`, count = 1, prev = 0, expires_at = `+pgClockMS+` + 2 * window_ms
				WHERE key = $1 RETURNING window_start`, dbKey(key)).Scan(&openedMS); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			h := <-got
			if !h.Allowed || h.State.Count != 2 || !h.State.Start.Equal(time.UnixMilli(openedMS)) {
				t.Fatalf("hit after the new window: %+v, want allowed, count 2 in the window opened at %d", h, openedMS)
			}
			if h.Now.Before(h.State.Start) {
				t.Errorf("hit settled at %s, %s before the window it counts in opened",
					h.Now.Format(time.StampMilli), h.State.Start.Sub(h.Now))
			}
			if room := rule.Room(h.State, h.Now); room != limit-2 {
				t.Errorf("room after 2 hits in a fresh window: got %d, want %d", room, limit-2)
			}
		})
	}
}

func hitNow(t *testing.T, p *Store, key string, rule driver.Rule) driver.Hit {
	t.Helper()
	type res struct {
		h   driver.Hit
		err error
	}
	ch := make(chan res, 1)
	if err := p.AddHit(key, rule, 1, driver.Lease{}, func(h driver.Hit, err error) { ch <- res{h, err} }); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.h
}

func connectDSN(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Peeks in one batch are each read at their own row's clock: a reset
// opens its window a millisecond after the one before it, so a key reset
// many times a second has a window start ahead of the clock, and read at
// that clock another key's window would seem closed (room where there is
// none).
func TestPeeksReadEachKeyAtItsOwnClock(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	rule := fixed(5, time.Hour)
	for range 5 {
		hitNow(t, p, "rate:t:full", rule)
	}
	hitNow(t, p, "rate:t:reset", rule)
	// The full key's window closes in a second; the reset key's starts
	// ten seconds ahead, as thousands of resets would leave it.
	mustExec(t, p, `UPDATE porch_rate_counters SET window_start = `+pgClockMS+` - window_ms + 1000,
		expires_at = `+pgClockMS+` + 1000 WHERE key = '`+string(dbKey("rate:t:full"))+`'`)
	mustExec(t, p, `UPDATE porch_rate_counters SET window_start = `+pgClockMS+` + 10000,
		expires_at = `+pgClockMS+` + 10000 + window_ms WHERE key = '`+string(dbKey("rate:t:reset"))+`'`)
	full := &commit.Hit{Key: "rate:t:full", Rule: rule}
	reset := &commit.Hit{Key: "rate:t:reset", Rule: rule}
	if err := p.writeBatch([]commit.Op{{Peek: full}, {Peek: reset}}); err != nil {
		t.Fatal(err)
	}
	if room := rule.Room(full.Result.State, full.Result.Now); room != 0 {
		t.Errorf("a full window peeked beside a key reset ahead of the clock: room %d (state %+v at %s), want 0",
			room, full.Result.State, full.Result.Now.Format(time.StampMilli))
	}
}
