package inflight_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// A database (or role) whose default isolation is REPEATABLE READ or
// SERIALIZABLE takes a transaction's snapshot at its first statement:
// for an acquire, the one that waits for the key's lock, before the
// acquires it waited for committed. Of limit+k concurrent acquires of one
// key, exactly limit must still succeed.
func TestSlotsExactUnderStricterIsolation(t *testing.T) {
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			const limit = 2
			opt := strings.ReplaceAll(url.QueryEscape("-c default_transaction_isolation="+strings.ReplaceAll(iso, " ", `\ `)), "+", "%20")
			base := pgtest.DSN(t)
			dsn := pgtest.WithParam(base, "pool_max_conns", "24") + "&options=" + opt
			// One store per acquire, as instances are: a store sends its
			// concurrent acquires in shared pipelines, one after another
			// on a connection, where only the first waits for the lock.
			const total = limit + 1
			stores := make([]*postgres.Store, total)
			for i := range stores {
				st, err := postgres.Open(context.Background(), dsn, postgres.Options{Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close(context.Background()) })
				stores[i] = st
			}
			st := stores[0]
			var got string
			if err := st.Pool().QueryRow(context.Background(), "SHOW default_transaction_isolation").Scan(&got); err != nil || got != iso {
				t.Fatalf("default_transaction_isolation %q (%v), want %q: the test would prove nothing", got, err, iso)
			}
			// Hold the key's lock (as an acquire in progress does) while
			// limit+1 acquires start and queue behind it, so that each
			// takes its first statement's snapshot before the ones ahead
			// of it commit.
			x, err := pgx.Connect(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close(context.Background())
			tx, err := x.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(context.Background(), `SELECT pg_advisory_xact_lock(hashtextextended(encode($1::bytea, 'hex'), 1))`, []byte("k")); err != nil {
				t.Fatal(err)
			}
			var granted, failed atomic.Int64
			var wg sync.WaitGroup
			for i := range total {
				wg.Go(func() {
					ok, _, err := stores[i].AcquireSlot(context.Background(), "k", string(rune('a'+i)), limit, time.Minute)
					switch {
					case err != nil:
						failed.Add(1)
						t.Log(err)
					case ok:
						granted.Add(1)
					}
				})
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				var waiting int
				if err := x.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting >= total {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d acquires waiting for the key's lock, want %d", waiting, total)
				}
				time.Sleep(5 * time.Millisecond) // polling the lock queue
			}
			if err := tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if g := granted.Load(); g != limit {
				t.Errorf("%d of %d concurrent acquires granted (%d failed), want exactly %d", g, total, failed.Load(), limit)
			}
		})
	}
}
