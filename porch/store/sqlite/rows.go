//go:build cgo

package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/mattn/go-sqlite3"

	porchdriver "github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/header"
)

// responseRows upserts stored responses through the driver's own prepared
// statement on the writer's connection, a run of them in one Raw call.
// Through database/sql each row paid its argument conversion, its
// connection locking and its argument slice: 9% of the committer's
// instructions for a batch of 32 responses, 350 bytes and 2 allocations a
// row. The statement and its arguments are touched only by the committer,
// inside Raw, so that database/sql still owns the connection.
type responseRows struct {
	stmt *sqlite3.SQLiteStmt        // sqlUpsertResponse, prepared at open; nil until then
	args [8]driver.NamedValue       // its arguments, reused row after row
	run  []*porchdriver.Response    // the run being written
	fn   func(driverConn any) error // Raw's callback, made once
	// The content type and times of the run's previous row, as boxed in
	// args: the rows of one run mostly share a content type and a
	// millisecond, and boxing each again cost 3 of a row's 6 allocations.
	contentType      string
	created, expires int64
}

// prepare prepares the statement on the writer's driver connection c.
func (w *responseRows) prepare(s *Store, c *sqlite3.SQLiteConn) error {
	st, err := c.Prepare(sqlUpsertResponse)
	if err != nil {
		return err
	}
	w.stmt = st.(*sqlite3.SQLiteStmt)
	for i := range w.args {
		w.args[i].Ordinal = i + 1
	}
	w.fn = func(any) error { return w.write(s) }
	return nil
}

// upsertRun stores the responses of batch, every one a plain Response op,
// in one Raw call.
func (s *Store) upsertRun(batch []commit.Op) error {
	w := &s.rows
	w.run = w.run[:0]
	for k := range batch {
		w.run = append(w.run, batch[k].Response)
	}
	return s.flushRows()
}

// upsertResponse stores one response.
func (s *Store) upsertResponse(r *porchdriver.Response) error {
	s.rows.run = append(s.rows.run[:0], r)
	return s.flushRows()
}

// flushRows writes the run, then lets its rows go with their batch.
func (s *Store) flushRows() error {
	w := &s.rows
	err := s.wconn.Raw(w.fn)
	clear(w.run)
	for i := range w.args {
		w.args[i].Value = nil
	}
	w.contentType = ""
	if err != nil {
		return fmt.Errorf("sqlite: save response: %w", err)
	}
	return nil
}

// write runs the statement once per row of the run, inside Raw.
func (w *responseRows) write(s *Store) error {
	for _, r := range w.run {
		body := r.Body
		if body == nil {
			body = []byte{} // an empty response (a 204) is a value, not NULL
		}
		hdr := header.Encode(r.Header)
		a := &w.args
		a[0].Value, a[1].Value, a[2].Value = r.Key, r.Digest, int64(r.Status)
		if a[3].Value == nil || r.ContentType != w.contentType {
			a[3].Value, w.contentType = r.ContentType, r.ContentType
		}
		a[4].Value, a[7].Value = body, hdr
		if c := r.Created.UnixMilli(); a[5].Value == nil || c != w.created {
			a[5].Value, w.created = c, c
		}
		if e := r.Expires.UnixMilli(); a[6].Value == nil || e != w.expires {
			a[6].Value, w.expires = e, e
		}
		if _, err := w.stmt.ExecContext(context.Background(), a[:]); err != nil {
			return err
		}
		s.savedDue = min(s.savedDue, r.Expires.UnixMilli()) // due from this batch's commit on
	}
	return nil
}

// close finalizes the statement, on the writer's connection.
func (w *responseRows) close(s *Store) {
	if w.stmt == nil || s.wconn == nil {
		return
	}
	s.wconn.Raw(func(any) error { return w.stmt.Close() }) //nolint:errcheck // closing anyway
	w.stmt = nil
}
