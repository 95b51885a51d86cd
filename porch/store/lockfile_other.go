//go:build !unix

package store

import "os"

// lockFile is a no-op where flock(2) does not exist: running two processes
// on one SQLite file there is the deployer's to avoid.
func lockFile(path string) (*os.File, error) { return nil, nil }
