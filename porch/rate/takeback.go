package rate

import (
	"context"
	"time"
)

// takeBack gives back a hit of weight n that key's actor counted in the
// window that opened at start, for a request a Set refused after all (see
// Set). It goes through key's actor, so that it is ordered with the key's
// hits: a request this process counts after the take-back was queued sees
// the count without it.
//
// It never waits for a write and never lowers what is durable below the
// in-memory count: on SQLite only the in-memory count goes down, and the
// stored count (already at or above it) is left to the next write; a crash
// before then over-counts by n, the safe side. A take-back that cannot be
// queued (the pool is closing) or whose write fails leaves the count high,
// and is logged.
func (l *Limiter) takeBack(key string, start time.Time, n int64) {
	// SendWait, not Send: a report that must not be lost, not new work.
	err := l.pool.SendWait(key, func(shard int) {
		if l.exclusive != nil {
			l.views[shard].takeBack(key, start, n)
			return
		}
		if err := l.shared.TakeBack(key, start, n, l.takeBackDone); err != nil {
			l.takeBackDone(err)
		}
	})
	if err != nil {
		l.takeBackDone(err)
	}
}

// takeBackDone logs a take-back that failed; the count stays high.
func (l *Limiter) takeBackDone(err error) {
	if err != nil {
		l.errs.Error(context.Background(), "rate: could not give back a refused request's hit; its count stays high until its window closes", "limiter", l.opt.Name, "err", err)
	}
}

// takeBack runs on v's actor: it lowers key's count by n if key's window is
// still the one that opened at start. A window that has closed since was
// reset, and its hits are gone already. The durable count is left as it
// is: it may now run ahead of the count, as a write-ahead bound does.
func (v *view) takeBack(key string, start time.Time, n int64) {
	w, ok := v.counts[key]
	if !ok || !w.start.Equal(start) {
		return
	}
	w.count = max(w.count-n, 0)
	v.counts[key] = w
}
