//go:build !unix

package sqlite

import (
	"context"
	"errors"
)

// ErrFileGone is returned by writes once the database file was deleted or
// replaced while open. Without file identities (non-Unix builds) it is
// never detected.
var ErrFileGone = errors.New("sqlite: the database file was deleted or replaced while open")

// files is a no-op where the OS gives no file identity.
type files struct{}

func (*Store) watchFiles(context.Context) (files, error) { return files{}, nil }

func (*files) check() error { return nil }
