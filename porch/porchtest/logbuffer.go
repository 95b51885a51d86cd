package porchtest

import (
	"bytes"
	"sync"
)

// LogBuffer collects what a logger writes, for a test to read back: pass
// it to slog.NewTextHandler or slog.NewJSONHandler and give the logger to
// porch (App.Logger, rate.Options.Logger, …). Unlike a bytes.Buffer it may
// be written by a server's goroutines while the test reads it. The zero
// value is ready to use.
type LogBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
