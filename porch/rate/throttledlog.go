package rate

import (
	"sync"
	"time"
)

// throttledLog lets one line through per interval and counts the rest.
type throttledLog struct {
	mu         sync.Mutex // protects the fields below
	last       time.Time  // when the last line went through; zero before the first
	suppressed int        // lines held back since then
}

// admit reports whether a line goes through at now, and how many were held
// back before it.
func (t *throttledLog) admit(now time.Time, every time.Duration) (suppressed int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A wall clock set back lets a line through rather than silence the
	// log until it has caught up.
	if d := now.Sub(t.last); !t.last.IsZero() && d >= 0 && d < every {
		t.suppressed++
		return 0, false
	}
	suppressed, t.suppressed, t.last = t.suppressed, 0, now
	return suppressed, true
}
