package rate

import (
	"slices"
	"time"
)

// view is one actor's in-memory picture of its keys' counters. Only that
// actor touches it, so it has no lock. It is exact because the actor is the
// only writer of its keys in the store.
type view struct {
	counts map[string]tally
	// expiry lists window starts in the order they were opened. Every window
	// of a limiter has the same length, so the oldest is always first and
	// expired keys are let go in O(1) per key, with no sweeper.
	expiry []opened
	head   int
}

type tally struct {
	start time.Time
	count int64
	// durable is the highest count known committed: hits up to it answer
	// at once.
	durable int64
	// pending is the newest queued write, of count pendingAt, until the
	// actor sees it settle; hits up to pendingAt wait for it.
	pending   *boundWrite
	pendingAt int64
}

// written is the highest count the store holds or will hold.
func (t tally) written() int64 { return max(t.durable, t.pendingAt) }

type opened struct {
	key   string
	start time.Time
}

func newView() *view { return &view{counts: make(map[string]tally)} }

// open starts a new window for key at now.
func (v *view) open(key string, now time.Time) tally {
	w := tally{start: now}
	v.counts[key] = w
	v.expiry = append(v.expiry, opened{key: key, start: now})
	return w
}

// forget lets go of up to max keys whose windows closed by now, so memory
// follows the live keys rather than every key ever seen.
func (v *view) forget(now time.Time, length time.Duration, max int) {
	for ; max > 0 && v.head < len(v.expiry); max-- {
		o := v.expiry[v.head]
		if now.Before(o.start.Add(length)) {
			break
		}
		if w, ok := v.counts[o.key]; ok && w.start.Equal(o.start) {
			delete(v.counts, o.key)
		}
		v.expiry[v.head] = opened{}
		v.head++
	}
	if v.head > 1024 && v.head*2 > len(v.expiry) {
		v.expiry = append(v.expiry[:0:0], v.expiry[v.head:]...)
		v.head = 0
	}
}

// sortOpened orders loaded windows oldest first, as forget expects.
func sortOpened(o []opened) {
	slices.SortFunc(o, func(a, b opened) int { return a.start.Compare(b.start) })
}
