// Package lifecycle holds what the framework and the stores share about
// being closed without either importing the other.
package lifecycle

import "errors"

// ErrClosed is the one error for "refused: Close has begun", exported as
// porch.ErrClosed and store.ErrClosed. One request can be refused by the
// pool or by the store, whichever closed first; one value lets a caller
// test for both with a single errors.Is.
var ErrClosed = errors.New("porch: closed")
