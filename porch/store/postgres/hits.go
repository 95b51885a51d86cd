package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writeonce/porch-go/porch/store"
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
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var key []byte
		var count, prev, startMS, nowMS int64
		if err := rows.Scan(&key, &count, &prev, &startMS, &nowMS); err != nil {
			return fmt.Errorf("postgres: add hits: %w", err)
		}
		kh := b.byKey[string(key)]
		if kh == nil || kh.seen {
			return fmt.Errorf("postgres: add hits: unexpected key %q returned", key)
		}
		kh.seen = true
		kh.settle(count, prev, time.UnixMilli(startMS), time.UnixMilli(nowMS))
		seen++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: add hits: %w", err)
	}
	if seen != len(g.keys) {
		return fmt.Errorf("postgres: add hits: %d of %d keys returned", seen, len(g.keys))
	}
	return nil
}

// takeBacks gives back the batch's take-backs in a transaction of their
// own, before its hits are counted, so that a take-back queued before a hit
// is applied before it. Its own transaction keeps a failure from failing the
// batch's hits: a take-back that failed leaves a count high, the safe side,
// and only its own caller hears of it (through Failed).
func (p *Store) takeBacks(ctx context.Context, batch []commit.Op) {
	type window struct {
		key   string // dbKey
		start int64
		lease bool
	}
	type sum struct{ n, settled int64 }
	sums := make(map[window]sum)
	for _, o := range batch {
		if tb := o.TakeBack; tb != nil {
			w := window{string(dbKey(tb.Key)), tb.WindowStart, tb.Lease}
			s := sums[w]
			sums[w] = sum{s.n + tb.N, s.settled + tb.Settled}
		}
	}
	if len(sums) == 0 {
		return
	}
	keys := make([][]byte, 0, len(sums))
	starts := make([]int64, 0, len(sums))
	ns := make([]int64, 0, len(sums))
	leases := make([]bool, 0, len(sums))
	settled := make([]int64, 0, len(sums))
	for w, s := range sums {
		keys, starts, ns = append(keys, []byte(w.key)), append(starts, w.start), append(ns, s.n)
		leases, settled = append(leases, w.lease), append(settled, s.settled)
	}
	err := p.hitsExec(ctx, pgTakeBack, keys, starts, ns, leases, settled)
	if err != nil {
		err = fmt.Errorf("postgres: take back hits: %w", err)
	}
	err = p.late(ctx, "take back hits", err)
	for i := range batch {
		if batch[i].TakeBack != nil {
			batch[i].Settled, batch[i].Failed = true, err
		}
	}
}

// pgBegin is readCommitted's BEGIN, queued in a pipeline instead of spent
// on a round trip of its own.
const pgBegin = `BEGIN ISOLATION LEVEL READ COMMITTED`

// pgCommitAsync, queued after pgBegin, lets the transaction's COMMIT
// answer once the server has the commit in its WAL buffers, before they
// are flushed (see queueBegin).
const pgCommitAsync = `SET LOCAL synchronous_commit = off`

// queueBegin queues the transaction's BEGIN and, under
// store.SurvivesProcessCrash, pgCommitAsync, and returns how many
// results they answer. Only the committer's transactions take it: they
// carry rate-limit counts alone (an owner's writes and its response
// commit in the owner's own transaction, at the server's level). A
// batch carrying Health's probe takes it too: a probe at the server's
// level would wait for a synchronous standby, and every hit in its batch
// with it; Health proves the server's level with a probe of its own (see
// Health). A later transaction that waits for the flush (a stored
// response, another instance's batch) flushes this one's commit with its
// own, since the WAL is flushed in order.
func (p *Store) queueBegin(pl *pgx.Batch) int {
	pl.Queue(pgBegin)
	if p.opt.Durability != store.SurvivesProcessCrash {
		return 1
	}
	pl.Queue(pgCommitAsync)
	return 2
}

// hitsExec runs one statement in a transaction of its own on the
// committer's pool, at the level queueBegin gives the hits: take-backs
// and resets. Either one lost in a crash leaves a count as high as it was
// before it, the safe side, as a lost hit leaves it lower; and since the
// WAL is flushed in order, a hit counted after it is lost with it. At the
// server's level, one waiting for a synchronous standby would hold up the
// hits of its batch, which at SurvivesProcessCrash wait for none. The
// transaction is one pipeline, one round trip; if a statement fails, it
// is left open and aborted, and the pool closes the connection.
func (p *Store) hitsExec(ctx context.Context, sql string, args ...any) error {
	pl := &pgx.Batch{}
	begins := p.queueBegin(pl)
	pl.Queue(sql, args...)
	pl.Queue("COMMIT")
	br := p.writer.SendBatch(ctx, pl)
	defer br.Close()
	if err := readBegin(br, begins); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return br.Close()
}

// readBegin reads the n results queueBegin queued.
func readBegin(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: begin: %w", err)
		}
	}
	return nil
}

// countHits counts b in one transaction on conn, in two round trips
// instead of one per statement: the first pipelines BEGIN, the add-hits
// upsert, Health's probe (if the batch carries it) and the bounded prunes;
// the second, once the upsert's counts have settled every hit, pipelines
// the refund of refused hits (if any) with COMMIT. It is still one
// transaction that takes its row locks in key order, then the probe row's;
// the refund touches only rows it already holds, and the prunes skip
// locked rows, so running them before the refund changes nothing. If a
// statement fails, the server skips the rest of its pipeline, COMMIT
// included, and leaves the transaction open and aborted: conn must then
// not go back to the pool as it is (pgxpool closes a connection released
// inside a transaction, which rolls it back).
func (p *Store) countHits(ctx context.Context, conn *pgx.Conn, b *batchHits) error {
	first := &pgx.Batch{}
	b.begins = p.queueBegin(first)
	for i := range b.adds {
		first.Queue(addStatements[b.adds[i].algorithm], b.adds[i].args()...)
	}
	if b.probe {
		for _, q := range commit.ProbeSQL {
			first.Queue(q)
		}
	}
	p.queuePrunes(first, b)
	if err := p.sendFirst(ctx, conn, first, b); err != nil {
		return err
	}
	// Peeks read what the batch's hits left, in its transaction: a round
	// trip of their own, only in a batch that carries one.
	if err := peekHits(ctx, conn, b.peeks); err != nil {
		return err
	}
	second := &pgx.Batch{}
	if r := b.refunds(true); len(r.keys) > 0 {
		second.Queue(pgRefundHits, r.args()...)
	}
	second.Queue("COMMIT")
	br := conn.SendBatch(ctx, second)
	defer br.Close()
	if len(second.QueuedQueries) > 1 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: refund refused hits: %w", err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return fmt.Errorf("postgres: commit hits: %w", err)
	}
	if tag.String() != "COMMIT" {
		// COMMIT of an aborted transaction answers ROLLBACK, not an error.
		return fmt.Errorf("postgres: commit hits: %w", pgx.ErrTxCommitRollback)
	}
	p.prunesCommitted(b)
	return br.Close()
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

// countFitting counts b, which fits, in one transaction and one round trip:
// BEGIN, pgAddFittingHits, Health's probe, the prunes and COMMIT in one
// pipeline. pgAddFittingHits counts a key's hits only if all of them fit
// its limit (in arrival order, each hit's running total is then within
// its limit, so settle allows every one), and otherwise leaves its row as
// it is and does not return it: those keys' ops are returned, uncounted,
// for countHits' two round trips, in a transaction of their own. So
// nothing refused is ever committed, and no refund is needed before
// COMMIT. Locks are taken as in countHits: keys in order, then the probe
// row. On a statement's error the server skips the rest of the pipeline,
// COMMIT included, and the transaction is open and aborted, as in
// countHits. An error in reading the answers here (a row that fails to
// scan, a key not asked for: a bug) may come after COMMIT was sent: the
// batch then fails with its hits counted, which only refuses more.
func (p *Store) countFitting(ctx context.Context, conn *pgx.Conn, b *batchHits) (rest []*commit.Op, err error) {
	g := &b.adds[0]
	pl := &pgx.Batch{}
	begins := p.queueBegin(pl)
	pl.Queue(pgAddFittingHits, byteKeys(g.keys), g.windows, g.hits, g.held, g.limits)
	// The leases' settlement and adoption stand whether a key's hits fit
	// or not, so they are queued for every key; those left over are
	// counted with theirs cleared (see countIsolated).
	settles := b.refunds(true)
	if len(settles.keys) > 0 {
		pl.Queue(pgRefundHits, settles.args()...)
	}
	if b.probe {
		for _, q := range commit.ProbeSQL {
			pl.Queue(q)
		}
	}
	p.queuePrunes(pl, b)
	pl.Queue("COMMIT")
	br := conn.SendBatch(ctx, pl)
	defer br.Close()
	if err := readBegin(br, begins); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("postgres: add fixed hits: %w", err)
	}
	for rows.Next() {
		var key []byte
		var count, prev, startMS, nowMS int64
		if err := rows.Scan(&key, &count, &prev, &startMS, &nowMS); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: add hits: %w", err)
		}
		kh := b.byKey[string(key)]
		if kh == nil || kh.seen {
			rows.Close()
			return nil, fmt.Errorf("postgres: add hits: unexpected key %q returned", key)
		}
		kh.seen = true
		kh.settle(count, prev, time.UnixMilli(startMS), time.UnixMilli(nowMS))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: add hits: %w", err)
	}
	if len(settles.keys) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("postgres: settle leases: %w", err)
		}
	}
	if b.probe {
		for range commit.ProbeSQL {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("postgres: health probe: %w", err)
			}
		}
	}
	if err := b.readPrunes(br); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("postgres: commit hits: %w", err)
	}
	if tag.String() != "COMMIT" {
		return nil, fmt.Errorf("postgres: commit hits: %w", pgx.ErrTxCommitRollback)
	}
	p.prunesCommitted(b)
	if err := br.Close(); err != nil {
		return nil, err
	}
	if r := b.refunds(false); len(r.keys) > 0 {
		// Cannot happen (the statement counted only keys where every hit
		// fits, and settle agrees); if it did, the refused weight is
		// taken back at once, in a transaction of its own.
		if _, err := conn.Exec(ctx, pgRefundHits, r.args()...); err != nil {
			commit.Log(p.opt.Logger).Warn("postgres: refund refused hits", "err", err)
		}
	}
	for _, kh := range b.byKey {
		if !kh.seen {
			for _, h := range kh.ops {
				rest = append(rest, b.opOf[h])
			}
		}
	}
	return rest, nil
}

// sendFirst runs countHits' first pipeline and settles b from it.
func (p *Store) sendFirst(ctx context.Context, conn *pgx.Conn, first *pgx.Batch, b *batchHits) error {
	br := conn.SendBatch(ctx, first)
	defer br.Close()
	if err := readBegin(br, b.begins); err != nil {
		return err
	}
	for i := range b.adds {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("postgres: add %s hits: %w", b.adds[i].algorithm, err)
		}
		if err := b.scanAddHits(&b.adds[i], rows); err != nil {
			return err
		}
	}
	if b.probe {
		for range commit.ProbeSQL {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("postgres: health probe: %w", err)
			}
		}
	}
	if err := b.readPrunes(br); err != nil {
		return err
	}
	return br.Close()
}

// writeBatch counts a batch of hits in one transaction (see countHits),
// on one of the committer's connections. The batch's take-backs and then
// its resets commit first, each in a transaction of their own (see
// takeBacks and resetHits), so a hit queued after either counts after it.
//
// The whole batch has Options.Timeout: past it, the statement running is
// cancelled on the server and the rest fail at once, so the committer is
// free for the next batch, which has a bound of its own, and a batch that
// commits (the standby back) heals the store with no restart.
func (p *Store) writeBatch(batch []commit.Op) error {
	if p.opt.CommitDelay > 0 {
		time.Sleep(p.opt.CommitDelay) // fault injection: a slow database
	}
	ctx, cancel := p.bounded(context.Background())
	defer cancel()
	return p.late(ctx, "commit batch", p.writeBounded(ctx, batch))
}

// writeBounded is writeBatch under ctx, its bound.
func (p *Store) writeBounded(ctx context.Context, batch []commit.Op) error {
	p.takeBacks(ctx, batch)
	var resets []string
	var ops []*commit.Op // what countHits counts: hits, peeks, Health's probe
	for i := range batch {
		o := &batch[i]
		if o.Reset != nil {
			resets = append(resets, o.Reset.Key)
		}
		if o.Hit != nil || o.Peek != nil || o.Probe {
			ops = append(ops, o)
		}
	}
	// A failed reset fails only its callers: the hits then count in the
	// window it did not clear, which is what they would have done before it.
	resetErr := p.resetHits(ctx, resets)
	for i := range batch {
		if batch[i].Reset != nil {
			batch[i].Settled, batch[i].Failed = true, resetErr
		}
	}
	conn, err := p.writer.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: commit batch: %w", err)
	}
	// Released inside a transaction (a statement failed), the connection
	// is closed, which rolls the transaction back.
	defer conn.Release()
	return p.countIsolated(ctx, conn.Conn(), ops)
}

// countIsolated counts ops in one transaction (countHits: two round trips)
// and, if a statement failed for one row's sake (see rowsFault), counts
// them again split in halves by key, recursively, so that only the ops of
// the offending key get the error and every other op of the batch commits.
// The split costs a few transactions per offending key, and only when one
// fails; a batch that commits takes the fast path alone.
//
// It returns nil once every op is settled, committed or failed alone, and
// an error for the whole batch otherwise; ops of a half that committed
// within the bound before such an error are Settled, so their callers hear
// that they committed. A part that committed only after the bound is
// settled as nothing: the whole batch is late (see pastBound).
func (p *Store) countIsolated(ctx context.Context, conn *pgx.Conn, ops []*commit.Op) error {
	b := groupHits(ops)
	if b.fits() {
		rest, err := p.countFitting(ctx, conn, &b)
		switch {
		case err == nil && len(rest) == 0:
			return nil
		case err == nil && ctx.Err() != nil:
			// What fitted committed only after the bound (see pastBound):
			// the whole batch is late, left over or not.
			return pastBound(ctx, "commit fitting hits")
		case err == nil:
			// What fitted has committed: its callers hear so whatever
			// becomes of the keys left over, which count below.
			for _, o := range ops {
				o.Settled = true
			}
			for _, o := range rest {
				o.Settled = false
				if o.Hit != nil {
					o.Hit.Settled, o.Hit.Adopted = 0, 0 // settled with what fitted
				}
			}
			ops = rest
			b = groupHits(ops)
		case !rowsFault(err):
			return err
		default:
			// Rolled back; the general path below counts the batch again
			// and isolates the offending key.
			if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
				return errors.Join(err, fmt.Errorf("postgres: roll back failed batch: %w", rerr))
			}
		}
	}
	err := p.countHits(ctx, conn, &b)
	if err == nil || !rowsFault(err) {
		return err
	}
	// The failed statement left the transaction open and aborted.
	if _, rerr := conn.Exec(ctx, "ROLLBACK"); rerr != nil {
		return errors.Join(err, fmt.Errorf("postgres: roll back failed batch: %w", rerr))
	}
	groups := groupByKey(ops)
	if len(groups) <= 1 {
		for _, o := range ops {
			o.Settled, o.Failed = true, err
		}
		return nil
	}
	half := len(groups) / 2
	left, right := slices.Concat(groups[:half]...), slices.Concat(groups[half:]...)
	if err := p.countIsolated(ctx, conn, left); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return pastBound(ctx, "commit a half of a split batch")
	}
	for _, o := range left {
		o.Settled = true // committed, or failed alone with Failed set
	}
	return p.countIsolated(ctx, conn, right)
}

// pastBound is the error of a batch part of which committed after ctx's
// bound: the server answers COMMIT with success when it cancels a wait for
// a synchronous standby (it committed on the primary alone; the WARNING
// saying so is only a notice, which pgx does not return), so a COMMIT that
// comes back once the bound has passed may not be durable as the
// durability level promises, and its hits must not be answered as counted.
// The committer answers every unsettled op of the batch with it (through
// late, which names it errLate).
func pastBound(ctx context.Context, what string) error {
	return fmt.Errorf("postgres: %s: %w", what, ctx.Err())
}

// groupByKey splits ops into one group per key (a hit's and a peek's of
// one key together), in dbKey order; Health's probe, which has no key,
// is a group of its own, first.
func groupByKey(ops []*commit.Op) [][]*commit.Op {
	idx := make(map[string]int)
	var keys []string
	var groups [][]*commit.Op
	for _, o := range ops {
		k := "" // the probe's: it sorts before every "k"-prefixed key
		switch {
		case o.Hit != nil:
			k = "k" + string(dbKey(o.Hit.Key))
		case o.Peek != nil:
			k = "k" + string(dbKey(o.Peek.Key))
		}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			keys = append(keys, k)
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], o)
	}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sorted := make([][]*commit.Op, len(groups))
	for i, j := range order {
		sorted[i] = groups[j]
	}
	return sorted
}

// rowsFault tells an error that one row's data can cause (a data
// exception, SQLSTATE class 22, such as a count out of bigint's range; a
// program limit, class 54, such as an index row too large) from one that
// fails the batch whatever it holds (a lost connection, a deadlock).
// Only the former is worth splitting the batch over.
func rowsFault(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "54":
		return true
	}
	return false
}

// byteKeys is dbKeys as bytea[] parameters.
func byteKeys(keys []string) [][]byte {
	b := make([][]byte, len(keys))
	for i, k := range keys {
		b[i] = []byte(k)
	}
	return b
}
