//go:build cgo && unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// fileID is what the OS calls a file: its device and inode. Every name of
// one file (the path it was created by, a symlink, a hard link, a path
// through a symlinked directory) has the same fileID.
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true //nolint:unconvert // the types differ by platform
}

// held is every database file this process has locked, by identity, with
// the path it was opened by.
var held = struct {
	sync.Mutex // protects m
	m          map[fileID]string
}{m: make(map[fileID]string)}

// lockFile takes an exclusive flock on the database file itself for as long
// as the store is open, and returns the function that releases it. The
// SQLite store's exactness rests on its process being the only writer of its
// counters; a second process on the same file would multiply every limit,
// and one on a hard link would even keep a second WAL, so it is refused at
// open. The lock is on the file, not on a name: a symlink or a hard link to
// an open database is refused too. The kernel drops it when the process
// dies, so a crash never leaves the file locked.
//
// flock and SQLite's fcntl locks are independent on Linux and the BSDs, so
// holding one does not disturb the other (on NFS, Linux emulates flock with
// fcntl; SQLite is not safe on NFS anyway). Closing any descriptor of a file
// drops all of this process's fcntl locks on it, SQLite's included, so the
// lock's descriptor must outlive the database's: release it after closing
// the database. For the same reason a second opener in this process is
// refused by identity before it opens a descriptor of its own.
func lockFile(path string) (release func(), err error) {
	if fi, err := os.Stat(path); err == nil {
		if id, ok := idOf(fi); ok {
			if holder, ok := heldHere(id); ok {
				return nil, fmt.Errorf("%w: %s is %s, which this process already has open", ErrLocked, path, holder)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, openError(path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, openError(path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, openError(path, errNotRegular)
	}
	id, _ := idOf(fi)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, lockedError(path, id)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	held.Lock()
	held.m[id] = path
	held.Unlock()
	// Once: a second Close must not unregister a later store on the file.
	return sync.OnceFunc(func() {
		held.Lock()
		delete(held.m, id)
		held.Unlock()
		f.Close()
	}), nil
}

func heldHere(id fileID) (string, bool) {
	held.Lock()
	defer held.Unlock()
	path, ok := held.m[id]
	return path, ok
}

// lockedError names the path this process tried and, where the holder can
// be found, the path the holder opened; otherwise the file's identity, for
// find -inum.
func lockedError(path string, id fileID) error {
	if pid, holder, ok := holderOf(id); ok {
		name := path + " is"
		if holder != path {
			name += " " + holder + ","
		}
		return fmt.Errorf("%w: %s open in process %d; stop it or give this process another file",
			ErrLocked, name, pid)
	}
	return fmt.Errorf("%w: %s (inode %d on device %d) is open in another process; stop it or give this process another file",
		ErrLocked, path, id.ino, id.dev)
}
