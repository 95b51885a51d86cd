package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writeonce/porch-go/porch/store"
)

// floor is the durability floor: the least a limiter that answers only
// after an exact, durable count must do, so that porch's rows can be read
// against what durability costs and not only against a limiter that keeps
// nothing. One writer goroutine takes every queued request, upserts each
// key's count once for all of that key's queued requests with one
// prepared INSERT … ON CONFLICT … RETURNING, in one WAL transaction
// (synchronous=FULL: the commit waits for the fsync; NORMAL with
// -durability process-crash), commits, and answers. It keeps no count in
// memory, has no actors, no windows and no refusals beyond the limit
// check: anything porch does beyond this is porch's own cost.
//
// It batches as porch's SQLite committer does (gatherMore): while recent
// batches were large, a smaller one waits up to gather for company. A
// commit's own work (BEGIN, WAL frames, fsync) is most of what a first
// hit costs at 16 connections, so a floor that commits what it finds at
// once pays it over fewer requests, and porch's lower CPU per request
// against it was the wait's, not porch's own: the floor must batch as
// well as porch can.
type floor struct {
	db     *sql.DB
	conn   *sql.Conn // the writer's one connection, which upsert is prepared on
	upsert *sql.Stmt
	limit  int64
	queue  chan *floorReq
	done   chan struct{}
	gather time.Duration // 0: commit what is queued at once
	peak   int           // the recent peak batch (the writer's own)

	closeOnce sync.Once
	commits   atomic.Int64
	writes    atomic.Int64
	failed    atomic.Int64
}

// floorReq is one request waiting for its count.
type floorReq struct {
	key     string
	allowed bool
	err     error
	reply   chan struct{}
}

// floorGather and floorSiblings are porch's SQLite commit wait and the
// recent batch size that turns it on (sqlite's commitGather,
// commit.GatherSiblings), which this module cannot import.
const (
	floorGather   = 200 * time.Microsecond
	floorSiblings = 4
)

// floorMaxBatch bounds a transaction's requests, as the default
// store.Options.MaxBatch bounds porch's.
const floorMaxBatch = 4096

const floorSchema = `CREATE TABLE IF NOT EXISTS floor_counters (
	key   TEXT    NOT NULL PRIMARY KEY,
	count INTEGER NOT NULL
)`

func openFloor(path string, limit int64, durability store.Durability, queue int, gather time.Duration) (*floor, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	if durability == store.SurvivesProcessCrash {
		q.Set("_synchronous", "NORMAL")
	}
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("floor: open: %w", err)
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, floorSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("floor: schema: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	upsert, err := conn.PrepareContext(ctx, `INSERT INTO floor_counters (key, count) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET count = count + excluded.count RETURNING count`)
	if err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("floor: prepare: %w", err)
	}
	f := &floor{db: db, conn: conn, upsert: upsert, limit: limit,
		queue: make(chan *floorReq, queue), done: make(chan struct{}), gather: gather}
	go f.run()
	return f, nil
}

// run is the writer: a batch is whatever is queued when the last commit
// ends.
func (f *floor) run() {
	defer close(f.done)
	batch := make([]*floorReq, 0, floorMaxBatch)
	for first := range f.queue {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < floorMaxBatch {
			select {
			case r, ok := <-f.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		batch = f.gatherMore(batch)
		f.peak = max(len(batch), f.peak-1)
		err := f.write(batch)
		if err != nil {
			f.failed.Add(1)
		} else {
			f.commits.Add(1)
		}
		for _, r := range batch {
			if err != nil {
				r.err = err
			}
			r.reply <- struct{}{}
		}
	}
}

// gatherMore waits, for at most f.gather, until batch is as large as the
// recent peak, if that was at least floorSiblings: porch's rule.
func (f *floor) gatherMore(batch []*floorReq) []*floorReq {
	target := min(f.peak, floorMaxBatch)
	if f.gather <= 0 || f.peak < floorSiblings || len(batch) >= target {
		return batch
	}
	t := time.NewTimer(f.gather)
	defer t.Stop()
	for len(batch) < target {
		select {
		case r, ok := <-f.queue:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		case <-t.C:
			return batch
		}
	}
	return batch
}

// write counts batch in one transaction: one upsert per key, then each
// request is allowed if the key's running count stays within the limit.
func (f *floor) write(batch []*floorReq) error {
	ctx := context.Background()
	sums := make(map[string]int64, len(batch))
	order := make([]string, 0, len(batch))
	for _, r := range batch {
		if sums[r.key] == 0 {
			order = append(order, r.key)
		}
		sums[r.key]++
	}
	if _, err := f.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	before := make(map[string]int64, len(order))
	for _, k := range order {
		var count int64
		if err := f.upsert.QueryRowContext(ctx, k, sums[k]).Scan(&count); err != nil {
			f.conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the batch fails either way
			return err
		}
		before[k] = count - sums[k]
	}
	if _, err := f.conn.ExecContext(ctx, "COMMIT"); err != nil {
		f.conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the batch fails either way
		return err
	}
	f.writes.Add(int64(len(order)))
	for _, r := range batch {
		before[r.key]++
		r.allowed = before[r.key] <= f.limit
	}
	return nil
}

// Handler is the floor as chi middleware: 429 over the limit, 503 when the
// count failed.
func (f *floor) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := clientIP(r)
		req := &floorReq{key: key, reply: make(chan struct{}, 1)}
		f.queue <- req
		<-req.reply
		switch {
		case req.err != nil:
			http.Error(w, "floor: "+req.err.Error(), http.StatusServiceUnavailable)
		case !req.allowed:
			w.Header().Set("Retry-After", strconv.Itoa(int(time.Hour/time.Second)))
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// Stats reports the writer's commits and the rows each wrote.
func (f *floor) Stats() store.Stats {
	return store.Stats{Commits: f.commits.Load(), Writes: f.writes.Load(), Failed: f.failed.Load()}
}

// Close stops the writer once the queued requests are answered (the
// server has stopped sending), and closes the database.
func (f *floor) Close(context.Context) error {
	f.closeOnce.Do(func() { close(f.queue) })
	<-f.done
	f.upsert.Close()
	f.conn.Close()
	return f.db.Close()
}
