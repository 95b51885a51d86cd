//go:build cgo && unix

package sqlite

import (
	"context"
	"fmt"
	"os"
)

// files checks, before each commit, that the database and its WAL are still
// the files this store opened. It costs two stat calls per batch. Only the
// committer touches it.
type files struct {
	path string
	db   fileID
	wal  fileID // zero until the WAL is first seen
}

// watchFiles starts watching the files by the name SQLite itself resolved
// (absolute, through symlinks): the WAL lives beside the real file, and a
// relative path would follow a later chdir.
func (s *Store) watchFiles(ctx context.Context) (files, error) {
	var path string
	if err := s.wconn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
		return files{}, fmt.Errorf("sqlite: read the database's file name: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return files{}, err
	}
	id, _ := idOf(fi)
	return files{path: path, db: id}, nil
}

func (f *files) check() error {
	if f.path == "" {
		return nil
	}
	if err := f.same(f.path, &f.db); err != nil {
		return err
	}
	return f.same(f.path+"-wal", &f.wal)
}

// same fails unless name still names the file *id (learning it if unset).
// SQLite keeps the WAL file for as long as a connection is open, so a
// missing WAL was deleted.
func (f *files) same(name string, id *fileID) error {
	fi, err := os.Stat(name)
	if err != nil {
		return fmt.Errorf("%w: %s: %w; stop this process: what it writes now would be lost at restart", ErrFileGone, name, err)
	}
	got, ok := idOf(fi)
	if !ok {
		return nil
	}
	if *id == (fileID{}) {
		*id = got
		return nil
	}
	if got != *id {
		return fmt.Errorf("%w: %s is now another file; stop this process: what it writes now would be lost at restart", ErrFileGone, name)
	}
	return nil
}
