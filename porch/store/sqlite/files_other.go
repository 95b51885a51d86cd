//go:build cgo && !unix

package sqlite

import "context"

// files is a no-op where the OS gives no file identity.
type files struct{}

func (*Store) watchFiles(context.Context) (files, error) { return files{}, nil }

func (*files) check() error { return nil }
