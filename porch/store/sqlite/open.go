//go:build cgo

package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/mattn/go-sqlite3"
)

// errNotRegular is wrapped in Open's error when its path names a
// device, a pipe or a socket.
var errNotRegular = errors.New("not a regular file")

// openError says which file Open could not open and what to do about
// it. SQLite's own words name neither: a read-only directory reports
// "attempt to write a readonly database" from the first query, which reads
// like a bug in the query. The cause stays wrapped for errors.Is and As.
func openError(path string, err error) error {
	if hint := openHint(path, err); hint != "" {
		return fmt.Errorf("sqlite: open %s: %s (%w)", path, hint, err)
	}
	return fmt.Errorf("sqlite: open %s: %w", path, err)
}

func openHint(path string, err error) string {
	dir, base := filepath.Dir(path), filepath.Base(path)
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrNotADB, sqlite3.ErrCorrupt:
			return "the file is not a SQLite database, or it is damaged; restore it from a backup, or move it aside to start empty (its counts and stored responses are then lost)"
		case sqlite3.ErrReadonly, sqlite3.ErrCantOpen, sqlite3.ErrPerm:
			return fmt.Sprintf("SQLite cannot write the file or create %s-wal and %s-shm beside it; make the file and the directory %s writable by this process",
				base, base, dir)
		case sqlite3.ErrIoErr:
			return fmt.Sprintf("the disk failed a read or a write; check the disk, and that %s-wal and %s-shm in %s, if present, are writable files",
				base, base, dir)
		case sqlite3.ErrFull:
			return "the disk is full; free space on it"
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return "another program holds a lock on the database (a sqlite3 shell?); close it"
		}
		return ""
	}
	switch {
	case errors.Is(err, syscall.EISDIR):
		return "the path is a directory; name a database file, such as " + filepath.Join(path, "porch.db")
	case errors.Is(err, errNotRegular):
		return "the path is a device, a pipe or a socket; name a database file"
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Sprintf("%s is not a directory (a part of it is a file); name a file in a directory", dir)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("the directory %s does not exist; create it first", dir)
	case errors.Is(err, syscall.EROFS):
		return "the file system is read-only; put the database on a writable one"
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("permission denied; make the file and the directory %s writable by this process", dir)
	}
	return ""
}

// closeDB closes the statements, then the connections, then the database:
// an open statement or connection keeps SQLite's descriptors of the file
// open, and the lock must outlive them all. It is safe after an init that
// failed part way.
func (s *Store) closeDB() error {
	for _, st := range []*sql.Stmt{s.stmts.deleteResponse, s.stmts.pruneResponses, s.stmts.loadResponse} {
		if st != nil {
			st.Close()
		}
	}
	s.rows.close(s)
	s.jr.close(s.wconn)
	if s.wconn != nil {
		s.wconn.Close()
	}
	if s.ckpt != nil {
		s.ckpt.close()
	}
	return s.db.Close()
}
