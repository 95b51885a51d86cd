//go:build cgo && unix && !linux

package sqlite

// holderOf cannot find a flock's holder without Linux's /proc/locks; the
// error then names the file by device and inode.
func holderOf(id fileID) (pid int, path string, ok bool) { return 0, "", false }
