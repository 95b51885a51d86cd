package testkit

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Log collects log output that the code under test writes from its
// goroutines while the test reads it. The zero value is ready to use; it
// is safe for concurrent use.
type Log struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CaptureLog returns a text logger for the code under test (an Options'
// Logger) and the Log it writes to.
func CaptureLog() (*slog.Logger, *Log) {
	l := &Log{}
	return slog.New(slog.NewTextHandler(l, nil)), l
}

// CaptureDefaultLog sends slog's default logger to a text Log until tb
// ends, for code that logs through slog.Default. Tests that use it must
// not run in parallel: the default logger is the process's.
func CaptureDefaultLog(tb testing.TB) *Log {
	tb.Helper()
	logger, l := CaptureLog()
	old := slog.Default()
	slog.SetDefault(logger)
	tb.Cleanup(func() { slog.SetDefault(old) })
	return l
}
