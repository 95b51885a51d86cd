package postgres

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// keyHits is one key's share of a batch.
type keyHits struct {
	key    string      // dbKey of the hits' key
	rule   driver.Rule // every hit of a key has its limiter's
	window time.Duration
	ops    []*commit.Hit // in arrival order
	sum    int64         // the weights of ops
	held   int64         // the leases' hits among them (commit.Hit.Held)
	// refused is the weight of the ops settle refused, to take back out,
	// and unheld their leases' hits, to take out of what leases hold.
	refused, unheld int64
	// settled and adopted are the leases' answered hits and taken-back
	// ones the ops report (commit.Hit), counted in the epoch leaseStart
	// (ms): only the newest epoch's if they report several, since an
	// older one's can only have ended with its window, and one left out
	// only keeps hits held, or its adopted hits unheld, which its lease
	// then never answers (it sees another State.Start).
	settled, adopted, leaseStart int64
	seen                         bool // pgAddHits returned the key's row
}

// batchHits is a batch's hits grouped by algorithm and key, as the add
// statements take them: one statement per algorithm, in algorithm order,
// and in each the keys sorted, so that two instances' batches lock rows
// in the same order ((algorithm, key): a key belongs to one limiter, so
// to one algorithm) and cannot deadlock; each key once, with the sum of
// its hits' weights.
type batchHits struct {
	byKey  map[string]*keyHits // by dbKey, as the add statements return it
	adds   []addGroup          // by algorithm name
	probe  bool                // the batch carries Health's probe
	begins int                 // results of countHits' queueBegin, which sendFirst reads
	peeks  []*commit.Hit
	opOf   map[*commit.Hit]*commit.Op // each hit's op, for countFitting's leftovers
	// prune marks a batch that carries the prunes (see pruner), and
	// pruned is what they deleted from the counters and the responses.
	prune  bool
	pruned [2]int64
}

// addGroup is one algorithm's keys in a batch: the arguments of its add
// statement.
type addGroup struct {
	algorithm string
	keys      []string // dbKeys, sorted bytewise as bytea sorts
	windows   []int64  // ms, per key
	intervals []int64  // ns, per key (GCRA)
	hits      []int64  // per key
	held      []int64  // per key: the leases' hits among hits
	limits    []int64  // per key, for pgAddFittingHits (see fits)
}

// addStatements are the add statements by algorithm (driver.Rule's
// Algorithm): a new algorithm is a statement here and its rule in
// porch/rate. Each advances a key's state to the batch's clock as the
// rule's Advance does, adds the hits, and returns key, count, prev,
// window_start and the clock, from which settle decides each hit by the
// rule's Room.
var addStatements = map[string]string{
	"fixed":   pgAddHits,
	"sliding": pgAddSlidingHits,
	"gcra":    pgAddGCRAHits,
}

// args are g's statement's arguments.
func (g *addGroup) args() []any {
	if g.algorithm == "gcra" {
		return []any{byteKeys(g.keys), g.windows, g.intervals, g.hits} // no leases
	}
	return []any{byteKeys(g.keys), g.windows, g.hits, g.held}
}

func groupHits(ops []*commit.Op) batchHits {
	b := batchHits{byKey: make(map[string]*keyHits), opOf: make(map[*commit.Hit]*commit.Op, len(ops))}
	for _, o := range ops {
		b.probe = b.probe || o.Probe
		if o.Peek != nil {
			b.peeks = append(b.peeks, o.Peek)
		}
		h := o.Hit
		if h == nil {
			continue
		}
		k := string(dbKey(h.Key))
		kh := b.byKey[k]
		if kh == nil {
			kh = &keyHits{key: k, rule: h.Rule, window: h.Rule.Window()}
			b.byKey[k] = kh
		}
		kh.ops = append(kh.ops, h)
		kh.sum += h.N
		kh.held += h.Held
		switch {
		case h.Settled == 0 && h.Adopted == 0 || h.LeaseStart < kh.leaseStart:
		case h.LeaseStart == kh.leaseStart:
			kh.settled += h.Settled
			kh.adopted += h.Adopted
		default:
			kh.settled, kh.adopted, kh.leaseStart = h.Settled, h.Adopted, h.LeaseStart
		}
		b.opOf[h] = o
	}
	keys := make([]string, 0, len(b.byKey))
	for k := range b.byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		if c := strings.Compare(b.byKey[x].rule.Algorithm(), b.byKey[y].rule.Algorithm()); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	for _, k := range keys {
		kh := b.byKey[k]
		if n := len(b.adds); n == 0 || b.adds[n-1].algorithm != kh.rule.Algorithm() {
			b.adds = append(b.adds, addGroup{algorithm: kh.rule.Algorithm()})
		}
		g := &b.adds[len(b.adds)-1]
		g.keys = append(g.keys, k)
		g.windows = append(g.windows, kh.window.Milliseconds())
		g.intervals = append(g.intervals, kh.rule.Interval().Nanoseconds())
		g.hits = append(g.hits, kh.sum)
		g.held = append(g.held, kh.held)
	}
	return b
}

// settle decides kh's hits, in arrival order, from count, the key's count
// after pgAddHits added all of them: a hit is counted if it keeps the
// running total within its limit, and is refused otherwise, so that a
// refused heavy hit leaves room for a lighter one after it, as on SQLite.
// It records in kh.refused the weight to take back out.
func (kh *keyHits) settle(count, prev int64, windowStart, now time.Time) {
	s := driver.State{Start: windowStart, Count: count - kh.sum, Prev: prev} // the state before this batch
	kh.refused, kh.unheld = 0, 0
	for _, h := range kh.ops {
		if h.N <= h.Rule.Room(s, now) {
			s.Count += h.N
			h.Result = driver.Hit{Allowed: true, State: s, Now: now}
			continue
		}
		h.Result = driver.Hit{State: s, Now: now}
		kh.refused += h.N
		kh.unheld += h.Held
	}
}

// refund is pgRefundHits' arguments: per key, the weights to take back
// out of its count and the leases' hits out of what they hold, and the
// leases' settlement and adoption.
type refund struct {
	keys                                          [][]byte
	refused, unheld, settled, adopted, leaseStart []int64
}

func (r *refund) args() []any {
	return []any{r.keys, r.refused, r.unheld, r.settled, r.adopted, r.leaseStart}
}

// refunds returns pgRefundHits' arguments for the keys some of whose hits
// settle refused, and, with leases, for those whose hits settle or adopt.
func (b *batchHits) refunds(leases bool) refund {
	var r refund
	for _, g := range b.adds {
		for _, k := range g.keys {
			kh := b.byKey[k]
			settled, adopted := kh.settled, kh.adopted
			if !leases {
				settled, adopted = 0, 0
			}
			if kh.refused > 0 || settled > 0 || adopted > 0 {
				r.keys = append(r.keys, []byte(k))
				r.refused = append(r.refused, kh.refused)
				r.unheld = append(r.unheld, kh.unheld)
				r.settled = append(r.settled, settled)
				r.adopted = append(r.adopted, adopted)
				r.leaseStart = append(r.leaseStart, kh.leaseStart)
			}
		}
	}
	return r
}

// scanAddHits settles every key of g from its add statement's rows.
func (b *batchHits) scanAddHits(g *addGroup, rows pgx.Rows) error {
	seen, err := b.scanAdded(rows)
	if err != nil {
		return err
	}
	if seen != len(g.keys) {
		return fmt.Errorf("postgres: add hits: %d of %d keys returned", seen, len(g.keys))
	}
	return nil
}

// scanAdded settles the keys an add statement returned, and says how
// many: every key of its group, or those that fit (pgAddFittingHits).
func (b *batchHits) scanAdded(rows pgx.Rows) (seen int, err error) {
	defer rows.Close()
	for rows.Next() {
		var key []byte
		var count, prev, startMS, nowMS int64
		if err := rows.Scan(&key, &count, &prev, &startMS, &nowMS); err != nil {
			return seen, fmt.Errorf("postgres: add hits: %w", err)
		}
		kh := b.byKey[string(key)]
		if kh == nil || kh.seen {
			return seen, fmt.Errorf("postgres: add hits: unexpected key %q returned", key)
		}
		kh.seen = true
		kh.settle(count, prev, time.UnixMilli(startMS), time.UnixMilli(nowMS))
		seen++
	}
	if err := rows.Err(); err != nil {
		return seen, fmt.Errorf("postgres: add hits: %w", err)
	}
	return seen, nil
}

// fits reports whether b can take countFitting's one round trip: fixed
// windows only, no peeks (they read after the hits, a round trip of their
// own), and every key's hits together within its limit from an empty
// window, so that a key with room for all of them from its stored count
// counts them all (see countFitting).
func (b *batchHits) fits() bool {
	if len(b.peeks) > 0 || len(b.adds) != 1 || b.adds[0].algorithm != "fixed" {
		return false
	}
	g := &b.adds[0]
	g.limits = g.limits[:0]
	for _, k := range g.keys {
		kh := b.byKey[k]
		limit := int64(math.MaxInt64)
		for _, h := range kh.ops {
			// A fixed window's Room is its limit less its count.
			limit = min(limit, h.Rule.Room(driver.State{}, time.Time{}))
		}
		if kh.sum > limit {
			return false
		}
		g.limits = append(g.limits, limit)
	}
	return true
}

// byteKeys is dbKeys as bytea[] parameters.
func byteKeys(keys []string) [][]byte {
	b := make([][]byte, len(keys))
	for i, k := range keys {
		b[i] = []byte(k)
	}
	return b
}
