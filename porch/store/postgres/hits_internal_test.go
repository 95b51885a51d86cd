package postgres

import (
	"math"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// One batch may carry several hits of one key, among other keys, with
// different weights and limits: each is decided in arrival order against
// the running count, a refused one changes nothing (a lighter hit after it
// may still pass), and each hit gets its own answer back.
func TestWriteBatchSettlesDuplicateKeys(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})

	type hit struct {
		key      string
		n, limit int64
		want     int64 // Result.Count
	}
	batches := []struct {
		name string
		hits []hit
		want map[string]int64 // the stored counts after the batch
	}{
		{"first", []hit{
			{"rate:a", 3, 5, 3},
			{"rate:b", 1, 1, 1},
			{"rate:a", 3, 5, 6}, // refused: 6 > 5
			{"rate:c", 2, 1, 2}, // refused on a fresh key: its row stays at 0
			{"rate:a", 2, 5, 5}, // fits after the refused one
			{"rate:b", 1, 1, 2}, // refused
			{"rate:a", 1, 5, 6}, // refused
			{"rate:a", 1, math.MaxInt64, 6},
		}, map[string]int64{"rate:a": 6, "rate:b": 1, "rate:c": 0}},
		{"second", []hit{
			{"rate:a", 1, 6, 7}, // refused
			{"rate:c", 1, 1, 1},
			{"rate:a", 1, 7, 7},
			{"rate:a", 1, 7, 8}, // refused
		}, map[string]int64{"rate:a": 7, "rate:b": 1, "rate:c": 1}},
	}
	for _, bc := range batches {
		ops := make([]commit.Op, len(bc.hits))
		for i, h := range bc.hits {
			ops[i] = commit.Op{Hit: &commit.Hit{Key: h.key, Rule: fixed(h.limit, time.Hour), N: h.n}}
		}
		if err := p.writeBatch(ops); err != nil {
			t.Fatalf("%s batch: writeBatch: %v", bc.name, err)
		}
		for i, h := range bc.hits {
			got := ops[i].Hit.Result
			if c := wouldCount(ops[i].Hit); c != h.want {
				t.Errorf("%s batch, hit %d (%s, n %d, limit %d): Count = %d, want %d", bc.name, i, h.key, h.n, h.limit, c, h.want)
			}
			if left := got.State.Start.Add(time.Hour).Sub(got.Now); left <= 0 || left > time.Hour {
				t.Errorf("%s batch, hit %d: time left = %v, want within (0, 1h]", bc.name, i, left)
			}
		}
		for key, want := range bc.want {
			if got := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = $1`, key); got != want {
				t.Errorf("%s batch: stored count of %s = %d, want %d", bc.name, key, got, want)
			}
		}
	}
}

// A reset and a take-back commit in transactions of their own before the
// batch's hits: when the hits then fail, the reset's and the take-back's
// callers hear that they committed, not the hits' error (once, a Reset
// that had cleared the count was reported failed, and a caller retrying it
// cleared the hits counted since).
func TestWriteBatchSettlesResetsApartFromHits(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	if err := p.writeBatch([]commit.Op{{Hit: &commit.Hit{Key: "rate:a", Rule: fixed(5, time.Hour), N: 3}}}); err != nil {
		t.Fatalf("first batch: %v", err)
	}
	mustExec(t, p, `CREATE FUNCTION porch_test_refuse() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'refused'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON porch_rate_counters FOR EACH ROW EXECUTE FUNCTION porch_test_refuse()`)
	batch := []commit.Op{
		{Reset: &commit.Reset{Key: "rate:a"}},
		{TakeBack: &commit.TakeBack{Key: "rate:zz", WindowStart: 0, N: 1}},
		{Hit: &commit.Hit{Key: "rate:b", Rule: fixed(5, time.Hour), N: 1}},
	}
	if err := p.writeBatch(batch); err == nil {
		t.Fatal("the hits' insert was refused by a trigger: want the batch to fail")
	}
	for _, i := range []int{0, 1} {
		if !batch[i].Settled || batch[i].Failed != nil {
			t.Errorf("op %d: got Settled %v, Failed %v; want settled, committed", i, batch[i].Settled, batch[i].Failed)
		}
	}
	if n := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = 'rate:a'`); n != 0 {
		t.Errorf("rate:a after the reset: got count %d, want 0", n)
	}
}

// fixed is the fixed-window rule of limit per window, as a limiter hands it
// to the store.
func fixed(limit int64, window time.Duration) driver.Rule {
	return algorithm.MustRule(algorithm.Fixed, limit, window, 0)
}

// wouldCount is the count h made, or for a refused hit would have made:
// its state's count, plus its weight if it was refused.
func wouldCount(h *commit.Hit) int64 {
	if h.Result.Allowed {
		return h.Result.State.Count
	}
	return h.Result.State.Count + h.N
}

// A batch whose every key's hits fit their limits from an empty window
// takes countFitting's one round trip; a key whose stored count leaves no
// room for them all is left out of it and counted by the general path,
// which refuses what does not fit: nothing refused is ever committed.
func TestWriteBatchFittingLeavesFullKeysToTheGeneralPath(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), Options{})
	type hit struct {
		key      string
		n, limit int64
		want     int64 // Result.Count
		allowed  bool
	}
	batches := [][]hit{
		{{"fit:a", 3, 5, 3, true}, {"fit:b", 1, 1, 1, true}},
		{
			{"fit:a", 1, 5, 4, true},
			{"fit:b", 1, 1, 2, false}, // full: left to the general path, refused
			{"fit:a", 1, 5, 5, true},
			{"fit:c", 1, 1, 1, true},
		},
		{{"fit:a", 1, 5, 6, false}, {"fit:a", 1, 6, 6, true}},
	}
	want := []map[string]int64{
		{"fit:a": 3, "fit:b": 1},
		{"fit:a": 5, "fit:b": 1, "fit:c": 1},
		{"fit:a": 6, "fit:b": 1, "fit:c": 1},
	}
	for bi, hits := range batches {
		ops := make([]commit.Op, len(hits))
		for i, h := range hits {
			ops[i] = commit.Op{Hit: &commit.Hit{Key: h.key, Rule: fixed(h.limit, time.Hour), N: h.n}}
		}
		if err := p.writeBatch(ops); err != nil {
			t.Fatalf("batch %d: writeBatch: %v", bi, err)
		}
		for i, h := range hits {
			r := ops[i].Hit.Result
			if c := wouldCount(ops[i].Hit); c != h.want || r.Allowed != h.allowed {
				t.Errorf("batch %d, hit %d (%s): Count %d, Allowed %v; want %d, %v", bi, i, h.key, c, r.Allowed, h.want, h.allowed)
			}
		}
		for key, w := range want[bi] {
			if got := count(t, p, `SELECT count FROM porch_rate_counters WHERE key = $1`, key); got != w {
				t.Errorf("batch %d: stored count of %s = %d, want %d", bi, key, got, w)
			}
		}
	}
}
