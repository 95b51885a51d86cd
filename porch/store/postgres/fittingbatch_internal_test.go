package postgres

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// The one-round-trip fitting batch and Reserve's read with the lock,
// across two instances: exact near the limit, isolated overflow, resets and
// take-backs in one batch, a committer terminated mid-batch.

// queryModeDSN is a fresh schema's DSN, in pgx's query mode PORCH_PGX_QUERY_MODE if set
// (simple_protocol, exec, describe_exec, cache_describe).
func queryModeDSN(t *testing.T) string {
	dsn := pgtest.DSN(t)
	if m := os.Getenv("PORCH_PGX_QUERY_MODE"); m != "" {
		dsn = pgtest.WithParam(dsn, "default_query_exec_mode", m)
	}
	return dsn
}

type hitTally struct {
	allowed, errored, refused atomic.Int64 // weights
}

func countHit(t *testing.T, p *Store, key string, rule driver.Rule, n int64, tl *hitTally) bool {
	ch := make(chan struct {
		h   driver.Hit
		err error
	}, 1)
	if err := p.AddHit(key, rule, n, driver.Lease{}, func(h driver.Hit, err error) {
		ch <- struct {
			h   driver.Hit
			err error
		}{h, err}
	}); err != nil {
		tl.errored.Add(n)
		return false
	}
	r := <-ch
	switch {
	case r.err != nil:
		tl.errored.Add(n)
	case r.h.Allowed:
		tl.allowed.Add(n)
		return true
	default:
		tl.refused.Add(n)
	}
	return false
}

// Two instances, 16 goroutines, weights 1..4 near the limit, then weight 1
// until refused: the allowed weights must sum to the limit exactly, for
// every algorithm (fixed takes countFitting, the others countHits), and
// with the sessions' default isolation SERIALIZABLE, under which the
// fitting path's autocommit statement, with no BEGIN to set READ
// COMMITTED, would fail the upsert of a row the other instance changed
// (pgAddFittingAlone leaves those batches to countHits' transaction).
func TestTwoInstancesExactNearLimit(t *testing.T) {
	for _, tc := range []struct {
		alg       algorithm.Algorithm
		isolation string
	}{
		{algorithm.Fixed, ""},
		{algorithm.Sliding, ""},
		{algorithm.GCRA, ""},
		{algorithm.Fixed, "serializable"},
	} {
		alg := tc.alg
		name := alg.Name()
		if tc.isolation != "" {
			name += "/" + tc.isolation
		}
		t.Run(name, func(t *testing.T) {
			dsn := queryModeDSN(t)
			if tc.isolation != "" {
				dsn = pgtest.WithParam(dsn, "default_transaction_isolation", tc.isolation)
			}
			stores := []*Store{openInternal(t, dsn, Options{}), openInternal(t, dsn, Options{})}
			const limit = 97
			rule := algorithm.MustRule(alg, limit, time.Hour, 0)
			var tl hitTally
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					p := stores[g%2]
					for i := 0; i < 12; i++ {
						countHit(t, p, "rate:hot", rule, int64(1+(g+i)%4), &tl)
					}
					for countHit(t, p, "rate:hot", rule, 1, &tl) {
					}
				}(g)
			}
			wg.Wait()
			if tl.errored.Load() != 0 || tl.allowed.Load() != limit {
				t.Fatalf("%s: allowed weight %d (errored %d, refused %d), want exactly %d", name, tl.allowed.Load(), tl.errored.Load(), tl.refused.Load(), limit)
			}
			if alg == algorithm.Fixed {
				if n := count(t, stores[0], `SELECT count FROM porch_rate_counters WHERE key = $1`, dbKey("rate:hot")); n != limit {
					t.Fatalf("stored count %d, want %d", n, limit)
				}
			}
		})
	}
}

// The fitting path's guard overflows bigint for a key whose stored count is
// near int64's max: only that key's hits may fail; the others commit. In
// a transaction (the batch carries the committer's probe) and in the
// autocommit statement of a batch that carries nothing else.
func TestFittingOverflowIsolated(t *testing.T) {
	for _, probe := range []bool{true, false} {
		t.Run(fmt.Sprintf("probe=%v", probe), func(t *testing.T) { fittingOverflowIsolated(t, probe) })
	}
}

func fittingOverflowIsolated(t *testing.T, probe bool) {
	p := openInternal(t, queryModeDSN(t), Options{})
	hit := func(key string, n int64) commit.Op {
		return commit.Op{Hit: &commit.Hit{Key: key, Rule: fixed(math.MaxInt64, time.Hour), N: n}}
	}
	if err := p.writeBatch([]commit.Op{hit("rate:big", 1)}); err != nil {
		t.Fatal(err)
	}
	mustExec(t, p, fmt.Sprintf(`UPDATE porch_rate_counters SET count = %d`, int64(math.MaxInt64-2)))
	ops := []commit.Op{hit("rate:a", 1), hit("rate:big", 5), hit("rate:b", 2)}
	if probe {
		ops = append(ops, commit.Op{Probe: true})
	}
	if err := p.writeBatch(ops); err != nil {
		t.Fatalf("writeBatch: %v", err)
	}
	if !ops[1].Settled || ops[1].Failed == nil {
		t.Errorf("overflowing hit: Settled %v Failed %v; want its own error", ops[1].Settled, ops[1].Failed)
	}
	for _, i := range []int{0, 2} {
		if ops[i].Failed != nil || !ops[i].Hit.Result.Allowed {
			t.Errorf("op %d: Failed %v Allowed %v", i, ops[i].Failed, ops[i].Hit.Result.Allowed)
		}
	}
	for k, w := range map[string]int64{"rate:a": 1, "rate:b": 2, "rate:big": math.MaxInt64 - 2} {
		if n := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = $1`, dbKey(k)); n != w {
			t.Errorf("%s: stored %d, want %d", k, n, w)
		}
	}
	poolIsClean(t, "writer", p.writer)
}

// Resets and take-backs in the same batch as hits at the limit: both apply
// before the hits, which then fit on the fast path.
func TestResetAndTakeBackInBatch(t *testing.T) {
	p := openInternal(t, queryModeDSN(t), Options{})
	r := fixed(5, time.Hour)
	first := []commit.Op{{Hit: &commit.Hit{Key: "rate:a", Rule: r, N: 5}}, {Hit: &commit.Hit{Key: "rate:b", Rule: r, N: 5}}}
	if err := p.writeBatch(first); err != nil {
		t.Fatal(err)
	}
	start := first[0].Hit.Result.State.Start.UnixMilli()
	ops := []commit.Op{
		{TakeBack: &commit.TakeBack{Key: "rate:a", WindowStart: start, N: 2}},
		{Reset: &commit.Reset{Key: "rate:b"}},
		{Hit: &commit.Hit{Key: "rate:a", Rule: r, N: 2}},
		{Hit: &commit.Hit{Key: "rate:b", Rule: r, N: 5}},
		{Hit: &commit.Hit{Key: "rate:a", Rule: r, N: 1}}, // refused: 5 already
	}
	if err := p.writeBatch(ops); err != nil {
		t.Fatal(err)
	}
	if !ops[2].Hit.Result.Allowed || !ops[3].Hit.Result.Allowed || ops[4].Hit.Result.Allowed {
		t.Errorf("allowed: %v %v %v, want true true false", ops[2].Hit.Result.Allowed, ops[3].Hit.Result.Allowed, ops[4].Hit.Result.Allowed)
	}
	for k, w := range map[string]int64{"rate:a": 5, "rate:b": 5} {
		if n := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = $1`, dbKey(k)); n != w {
			t.Errorf("%s: stored %d, want %d", k, n, w)
		}
	}
}

// The committer's connections are terminated again and again while two
// instances hammer one key: every allowed weight must be in the stored
// count (allowed ⇒ committed), nothing above the limit, and nothing counted
// twice (stored ≤ allowed + errored).
func TestTerminateCommitterMidBatch(t *testing.T) {
	dsn := queryModeDSN(t)
	app := fmt.Sprintf("porch_killed_%d", time.Now().UnixNano())
	kdsn := pgtest.WithParam(dsn, "application_name", app)
	stores := []*Store{openInternal(t, kdsn, Options{}), openInternal(t, kdsn, Options{})}
	admin := openInternal(t, dsn, Options{})
	const limit = 400
	rule := fixed(limit, time.Hour)
	var tl hitTally
	stop := make(chan struct{})
	var killed atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			var n int64
			_ = admin.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1 AND state <> 'idle'`, app).Scan(&n)
			killed.Add(n)
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				countHit(t, stores[g%2], "rate:k", rule, int64(1+(g+i)%3), &tl)
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	stored := count(t, admin, `SELECT coalesce((SELECT count FROM porch_rate_counters WHERE key = $1), 0)`, dbKey("rate:k"))
	t.Logf("killed %d backends; allowed %d errored %d refused %d stored %d", killed.Load(), tl.allowed.Load(), tl.errored.Load(), tl.refused.Load(), stored)
	if stored > limit {
		t.Errorf("stored %d above the limit %d", stored, limit)
	}
	if tl.allowed.Load() > stored {
		t.Errorf("allowed %d > stored %d: a verdict without its count committed", tl.allowed.Load(), stored)
	}
	if stored > tl.allowed.Load()+tl.errored.Load() {
		t.Errorf("stored %d > allowed %d + errored %d: a hit counted twice", stored, tl.allowed.Load(), tl.errored.Load())
	}
}

// Duplicate storms across two instances, no sleep in the owner: a response
// committed by the other instance between lock grant and Reserve's read
// must be seen; exactly one side effect per key.
func TestReserveReadSeesCommittedResponse(t *testing.T) {
	dsn := queryModeDSN(t)
	stores := []*Store{openInternal(t, dsn, Options{KeyConns: 6}), openInternal(t, dsn, Options{KeyConns: 6})}
	mustExec(t, stores[0], `CREATE TABLE effects (key text, who int)`)
	const keys = 150
	var wg sync.WaitGroup
	var replays atomic.Int64
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			p := stores[g%2]
			ctx := context.Background()
			for k := 0; k < keys; k++ {
				key := fmt.Sprintf("idem:s%d", k)
				r, err := p.Reserve(ctx, key)
				if err != nil {
					t.Errorf("Reserve: %v", err)
					return
				}
				res, ok, err := r.Load(ctx)
				if err != nil {
					t.Errorf("Load: %v", err)
					r.Release()
					return
				}
				if ok {
					if string(res.Body) != "done" {
						t.Errorf("replayed body %q", res.Body)
					}
					replays.Add(1)
					r.Release()
					continue
				}
				_ = r.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, key, g)
				if err := r.Save(ctx, driver.Response{Digest: []byte("d"), Status: 201, Body: []byte("done")}, time.Hour); err != nil {
					t.Errorf("Save: %v", err)
				}
			}
		}(g)
	}
	wg.Wait()
	if n := count(t, stores[0], `SELECT count(*) FROM (SELECT key FROM effects GROUP BY key HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d keys executed more than once", n)
	}
	if n := count(t, stores[0], `SELECT count(DISTINCT key) FROM effects`); n != keys {
		t.Fatalf("%d keys executed, want %d", n, keys)
	}
	t.Logf("replays %d", replays.Load())
}
