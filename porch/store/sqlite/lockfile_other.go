//go:build cgo && !unix

package sqlite

// lockFile is a no-op where flock(2) does not exist: running two processes
// on one SQLite file there is the deployer's to avoid.
func lockFile(path string) (release func(), err error) { return func() {}, nil }
