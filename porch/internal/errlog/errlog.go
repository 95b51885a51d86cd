// Package errlog logs the errors porch's middlewares fail closed on without
// flooding: the first of a kind at once, then at most one line of that kind
// per interval, carrying how many were held back.
package errlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// DefaultEvery is how often a Log lets a repeated kind of error through,
// and the interval of the process's (see [Error]). The docs of
// rate.Options.Logger and idem.Options.Logger state its value: change
// them with it.
const DefaultEvery = 10 * time.Second

// Log logs errors at ERROR without flooding. A store that fails fails
// every request the same way: a full disk logged some ten thousand lines a
// second, which spent what was left of the disk and buried the first line,
// the one that says why. So the first error of a kind is logged at once,
// and after that at most one line of that kind per interval, carrying
// "suppressed", the count held back since the kind's last line.
//
// A kind is the message. Each kind is remembered for the life of the
// Log, so messages must come from a fixed set, a constant at each call
// site, with what varies in the attributes. Errors held back at the end of
// a burst are counted in the next line of their kind, if one comes.
//
// A Log is safe for concurrent use. Create it with [New]; a
// nil *Log logs through the process's, as [Error] does.
type Log struct {
	clock  clock.Clock
	every  time.Duration
	logger *slog.Logger // if nil, the request's (see logctx.Logger) at each call

	mu    sync.Mutex // protects kinds
	kinds map[string]*errorKind
}

type errorKind struct {
	logged     time.Duration // clock.Monotonic() at the kind's last line
	suppressed int           // errors held back since that line
}

// New returns a Log that logs each kind at most once per every
// on clock's monotonic reading, to logger. If every is zero,
// DefaultEvery; if logger is nil, App.Logger when the line is about
// a request an App serves, else slog.Default() as of each call. A line
// about a request that chi's middleware.RequestID saw carries its
// "request_id". It panics on a negative every or a nil clock.
func New(clock clock.Clock, every time.Duration, logger *slog.Logger) *Log {
	if clock == nil || every < 0 {
		panic("errlog: New expects a clock and every >= 0")
	}
	if every == 0 {
		every = DefaultEvery
	}
	return &Log{clock: clock, every: every, logger: logger, kinds: make(map[string]*errorKind)}
}

// Error logs msg and args at ERROR, unless a line of kind msg was logged less
// than the interval ago: then it only counts it. On a nil l it is [Error].
func (l *Log) Error(ctx context.Context, msg string, args ...any) {
	if l == nil {
		l = process
	}
	suppressed, ok := l.admit(msg)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	logctx.Logger(ctx, l.logger).ErrorContext(ctx, msg, args...)
}

// admit decides whether a line of kind msg is logged now, and how many it
// held back before it.
func (l *Log) admit(msg string) (suppressed int, ok bool) {
	now := l.clock.Monotonic()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, seen := l.kinds[msg]
	if !seen {
		l.kinds[msg] = &errorKind{logged: now}
		return 0, true
	}
	if now-k.logged < l.every {
		k.suppressed++
		return 0, false
	}
	suppressed, k.suppressed, k.logged = k.suppressed, 0, now
	return suppressed, true
}

// process is the process's Log, for [Error].
var process = New(clock.System{}, DefaultEvery, nil)

// Error logs through the process's Log (every DefaultEvery,
// to App.Logger for a request an App serves, else slog's default logger): for errors that recur with every request while
// a dependency is down, such as the store failures fail.Detail logs. msg is
// the kind and must be a constant.
func Error(ctx context.Context, msg string, args ...any) {
	process.Error(ctx, msg, args...)
}
