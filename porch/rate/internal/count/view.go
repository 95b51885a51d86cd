package count

import (
	"slices"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// forgetPerHit bounds how many ended states one hit lets go of, so eviction
// costs a constant per request.
const forgetPerHit = 4

// forgetPerTick bounds how many ended states one timer-driven forget job
// lets go of before it yields the actor to requests again.
const forgetPerTick = 4096

// view is one actor's in-memory picture of its keys' counters. Only that
// actor touches it, so it has no lock. It is exact because the actor is the
// only writer of its keys in the store.
type view struct {
	shard  int // the actor this view belongs to
	counts map[string]tally
	// expiry lists window starts in the order they were opened. Every window
	// of a limiter has the same length, so the oldest is always first and
	// expired keys are let go in O(1) per key, with no sweeper.
	expiry []opened
	head   int
	// peak is len(counts) at its largest since the map was last rebuilt.
	// Go maps never give memory back as entries are deleted, so forget
	// rebuilds the map once it has shrunk to a quarter of that.
	peak int
	// timer, when armed, sends this actor a forget job once its oldest
	// window closes, so an idle actor lets its keys go too.
	timer *time.Timer
	armed bool
}

type tally struct {
	start time.Time // the state's epoch (driver.State.Start)
	count int64
	prev  int64 // the sliding window's previous count
	// durable is the highest count known committed: hits up to it answer
	// at once.
	durable int64
	// pending is the newest queued write, of count pendingAt, until the
	// actor sees it settle; hits up to pendingAt wait for it.
	pending   *boundWrite
	pendingAt int64
	// streak is how many hits this key's earlier epochs counted while its
	// tally stayed in memory, for an algorithm whose epochs carry over
	// (capped; see local.carry): a busy bucket opens a new epoch at nearly
	// every hit when its rate is far under the limit, and its write-ahead
	// margin grows with the streak rather than starting over at each
	// epoch. Always 0 for windows.
	streak int64
}

// state is the algorithm's part of t; a key never seen has the zero state.
func (t tally) state() driver.State {
	return driver.State{Start: t.start, Count: t.count, Prev: t.prev}
}

// written is the highest count the store holds or will hold.
func (t tally) written() int64 { return max(t.durable, t.pendingAt) }

type opened struct {
	key   string
	start time.Time
}

func newView(shard int) *view { return &view{shard: shard, counts: make(map[string]tally)} }

// open starts a new epoch for key in state s, of which nothing is written.
func (v *view) open(key string, s driver.State) tally {
	w := tally{start: s.Start, count: s.Count, prev: s.Prev}
	v.counts[key] = w
	v.peak = max(v.peak, len(v.counts))
	v.expiry = append(v.expiry, opened{key: key, start: s.Start})
	return w
}

// forget lets go of up to max keys whose states ended by now (length
// after their start: the rule's life), so that memory follows the live
// keys rather than every key ever seen.
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
	if v.peak > 1024 && len(v.counts) < v.peak/4 {
		// A fresh map sized for what is left. Not maps.Clone: a clone
		// keeps the source's table size, which is the memory to let go.
		fresh := make(map[string]tally, len(v.counts))
		for k, w := range v.counts {
			fresh[k] = w
		}
		v.counts = fresh
		v.peak = len(v.counts)
	}
}

// oldest reports when the oldest window still listed closes; ok is false
// when none is listed.
func (v *view) oldest(length time.Duration) (end time.Time, ok bool) {
	if v.head == len(v.expiry) {
		return time.Time{}, false
	}
	return v.expiry[v.head].start.Add(length), true
}

// sortOpened orders loaded windows oldest first, as forget expects.
func sortOpened(o []opened) {
	slices.SortFunc(o, func(a, b opened) int { return a.start.Compare(b.start) })
}
