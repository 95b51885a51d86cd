package store

import (
	"errors"
	"fmt"
)

// errNotRegular is wrapped in OpenSQLite's error when its path names a
// device, a pipe or a socket.
var errNotRegular = errors.New("not a regular file")

func openError(path string, err error) error {
	return fmt.Errorf("store: open %s: %w", path, err)
}
