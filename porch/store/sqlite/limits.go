//go:build cgo

package sqlite

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/mattn/go-sqlite3"
)

// SQLite looks for an interrupt only between the steps of a statement, so
// the budget (Options.ExecBudget) cannot stop a step once it has
// started: one that writes a 300 MiB argument, or builds a value with
// zeroblob, printf or replace, ran for seconds past a 50 ms budget, and
// every write of the process waited behind it. So while an application's
// statement runs, the writer holds it to limits on what one step can
// handle, and porch's own statements run under SQLite's defaults again.
const (
	// maxAppValue is the largest string or blob an application's
	// statement may bind or build (SQLITE_LIMIT_LENGTH): idem's default
	// MaxBody, so that an owner can store the request body it was given. Writing or building one such value takes milliseconds.
	maxAppValue = 1 << 20
	// maxAppSQL is the longest text of an application's statement
	// (SQLITE_LIMIT_SQL_LENGTH): it bounds how many values one row of it
	// can build in one step.
	maxAppSQL = 64 << 10
	// maxAppPattern is the longest LIKE or GLOB pattern
	// (SQLITE_LIMIT_LIKE_PATTERN_LENGTH): matching costs up to the value's
	// length times the pattern's: 68 ms for a 50-byte pattern against a
	// 1 MiB value, 0.6 s for a 100-byte one.
	maxAppPattern = 50
)

// appLimits are the limits set while an application's statement runs.
var appLimits = [...]struct{ id, value int }{
	{sqlite3.SQLITE_LIMIT_LENGTH, maxAppValue},
	{sqlite3.SQLITE_LIMIT_SQL_LENGTH, maxAppSQL},
	{sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, maxAppPattern},
}

// ownLimits are the writer's limits for porch's own statements, in the
// order of appLimits: SQLite's defaults, read at open.
type ownLimits [len(appLimits)]int

// read reads the writer connection c's limits for porch's own statements.
func (l *ownLimits) read(c *sqlite3.SQLiteConn) {
	for i, a := range appLimits {
		l[i] = c.SetLimit(a.id, -1) // a negative value reads the limit
	}
}

// holdToAppLimits sets the writer's limits for an application's
// statement, or, with app false, sets porch's own back. Only the
// committer calls it.
func (s *Store) holdToAppLimits(app bool) error {
	return s.wconn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		for i, l := range appLimits {
			v := s.ownLimits[i]
			if app {
				v = l.value
			}
			c.SetLimit(l.id, v)
		}
		return nil
	})
}

// valueArgs converts an application's arguments to the values the driver
// binds, as database/sql would (driver.DefaultParameterConverter: go-sqlite3
// has no converter of its own), on the caller's goroutine, before the
// statement is queued. A driver.Valuer's Value is the application's code:
// run on the committer, a panic in it killed the process, out of reach of
// the handler's recovery, and a slow one held every write of the process
// waiting, beyond any ExecBudget, since the budget starts with the
// statement. Converted, a named []byte or string type, or a Valuer's
// result, is also seen by checkAppArgs for what it is. args is not
// changed.
func valueArgs(args []any) ([]any, error) {
	if len(args) == 0 {
		return args, nil
	}
	out := make([]any, len(args))
	for i, a := range args {
		na, named := a.(sql.NamedArg)
		if named {
			a = na.Value
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return nil, fmt.Errorf("sqlite: converting argument %d: %w", i+1, err)
		}
		if named {
			na.Value = v
			out[i] = na
		} else {
			out[i] = v
		}
	}
	return out, nil
}

// checkAppArgs refuses, before SQLite sees it, an argument longer than an
// application's statement may bind: SQLite would refuse it at the bind,
// but only after the driver had copied it.
func checkAppArgs(args []any) error {
	for i, a := range args {
		if na, ok := a.(sql.NamedArg); ok {
			a = na.Value
		}
		var n int
		switch v := a.(type) {
		case string:
			n = len(v)
		case []byte:
			n = len(v)
		}
		if n > maxAppValue {
			return fmt.Errorf("%w: argument %d is %d bytes, more than the %d a value may have there", ErrRefused, i+1, n, maxAppValue)
		}
	}
	return nil
}

// tooBig wraps SQLite's refusal of a value or a statement over appLimits
// with ErrRefused, so that its caller can tell it from a statement that
// failed on its own terms.
func tooBig(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrTooBig {
		return fmt.Errorf("%w: a value over %d bytes, a statement over %d bytes or a LIKE or GLOB pattern over %d bytes: %w",
			ErrRefused, maxAppValue, maxAppSQL, maxAppPattern, err)
	}
	return err
}
