package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/writeonce/porch-go/porch/store"
)

// naive is the design group commit must beat: a correct, durable SQLite
// fixed-window limiter that, per request, reads the key's count, increments
// it and commits (synchronous=FULL), all under one mutex, so that every
// request pays its own fsync and no two read-modify-writes interleave.
type naive struct {
	mu sync.Mutex // serializes the read-modify-write on db
	db *sql.DB

	limit   int64
	window  time.Duration
	commits atomic.Int64
}

const naiveSchema = `CREATE TABLE IF NOT EXISTS naive_counters (
	key          TEXT    NOT NULL PRIMARY KEY,
	window_start INTEGER NOT NULL,
	count        INTEGER NOT NULL
)`

func openNaive(path string, limit int64, window time.Duration) (*naive, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("naive: open: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(naiveSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("naive: schema: %w", err)
	}
	return &naive{db: db, limit: limit, window: window}, nil
}

// allow counts one request for key and reports whether it is within the
// limit, once the new count has committed.
func (n *naive) allow(ctx context.Context, key string) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	now := time.Now().UnixMilli()
	var start, count int64
	err = tx.QueryRowContext(ctx, `SELECT window_start, count FROM naive_counters WHERE key = ?`, key).Scan(&start, &count)
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && now >= start+n.window.Milliseconds()):
		start, count = now, 0
	case err != nil:
		return false, err
	}
	if count >= n.limit {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO naive_counters (key, window_start, count) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET window_start = excluded.window_start, count = excluded.count`,
		key, start, count+1); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	n.commits.Add(1)
	return true, nil
}

// Handler is the limiter as chi middleware: 429 over the limit, 503 when
// the count failed.
func (n *naive) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := clientIP(r)
		allowed, err := n.allow(r.Context(), key)
		switch {
		case err != nil:
			http.Error(w, "naive: "+err.Error(), http.StatusServiceUnavailable)
		case !allowed:
			w.Header().Set("Retry-After", strconv.FormatInt(int64(n.window/time.Second)+1, 10))
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// Stats reports one commit, of one write, per counted request.
func (n *naive) Stats() store.Stats {
	c := n.commits.Load()
	return store.Stats{Commits: c, Writes: c}
}

// Close closes the database.
func (n *naive) Close(context.Context) error { return n.db.Close() }
