package redis

import (
	"fmt"
	"maps"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// counterKey is key's Redis key: Prefix, a hash tag, then key itself.
//
// The tag is a digest of the key's principal part (everything after
// "rate:<name>:" or the in-flight limiter's "inflight:<name>:", so
// "p:<principal>" or "ip:<address>"), so that every limiter's key for one
// principal, its in-flight slots included, lands in one hash slot of a
// cluster: the members of a rate.All keyed alike are counted on one node. It is
// hex, so it never holds a brace whatever bytes the principal has. Each
// hit is still its own script: a rate.All's members count separately,
// and give a refused request's hits back (TakeBack), as on the SQL stores.
//
// It is built in one allocation: every hit's key is made here, on the
// committer's goroutine.
func (s *Store) counterKey(key string) string {
	var b strings.Builder
	b.Grow(len(s.opt.Prefix) + 18 + len(key))
	b.WriteString(s.opt.Prefix)
	b.WriteByte('{')
	var tag [16]byte
	b.Write(appendHashTag(tag[:0], key))
	b.WriteByte('}')
	b.WriteString(key)
	return b.String()
}

// hashTag is the hex digest of key's principal part (see counterKey).
func hashTag(key string) string {
	var tag [16]byte
	return string(appendHashTag(tag[:0], key))
}

// appendHashTag appends the hex digest of key's principal part (see
// counterKey): 16 lowercase hex digits of its 64-bit FNV-1a hash.
func appendHashTag(b []byte, key string) []byte {
	rest := key
	for _, kind := range [...]string{"rate:", "inflight:"} {
		if after, ok := strings.CutPrefix(key, kind); ok {
			if i := strings.IndexByte(after, ':'); i >= 0 {
				rest = after[i+1:]
			}
			break
		}
	}
	// FNV-1a, 64 bits, as hash/fnv's New64a, without its allocation.
	h := uint64(14695981039346656037)
	for i := 0; i < len(rest); i++ {
		h ^= uint64(rest[i])
		h *= 1099511628211
	}
	const hex = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hex[h>>uint(shift)&0xf])
	}
	return b
}

// Bounds on a rule's parameters beyond which the scripts' arithmetic
// (doubles) might not be exact; rate.New's own bounds (rate.MaxLimit,
// rate.MaxWindow) lie well within them.
const (
	maxLimit    = 1 << 48 // a limit or burst
	maxWindowMS = 1 << 48 // a window, or burst × interval, in ms
)

// hitArgs are a hit's script and its arguments after the weight n.
type hitArgs struct {
	script *goredis.Script
	args   []any
}

// maxCachedRules bounds Store.rules: a program makes a few rules, one per
// limiter, and a program that makes them without end still gets its
// arguments, computed each time.
const maxCachedRules = 1024

// ruleKey is all of a rule that its script's arguments are made of: its
// algorithm, window and interval, and most, what a state never seen
// admits (the limit, or GCRA's burst). The arguments are kept under it
// rather than under the rule: a rule of a program's own type may hold an
// unhashable value (a panic as a map key) or change under a pointer (stale
// arguments), while a key is a plain value read from the rule afresh at
// each hit.
type ruleKey struct {
	alg              string
	most             int64
	window, interval time.Duration
}

// keyOf reads rule's key.
func keyOf(rule driver.Rule) ruleKey {
	t := time.Unix(1<<31, 0)
	return ruleKey{
		alg:      rule.Algorithm(),
		most:     rule.Room(rule.Advance(driver.State{}, t), t),
		window:   rule.Window(),
		interval: rule.Interval(),
	}
}

// hitArgs returns rule's script and arguments, kept by its key: a hit
// needs them twice, when it is queued and when it is sent, and computing
// them allocates. Readers load the map without a lock; a new key copies
// it, which the bound keeps rare.
func (s *Store) hitArgs(rule driver.Rule) (hitArgs, error) {
	k := keyOf(rule)
	if m := s.rules.Load(); m != nil {
		if a, ok := (*m)[k]; ok {
			return a, nil
		}
	}
	a, err := k.args()
	if err != nil {
		return hitArgs{}, err
	}
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	if old == nil || len(*old) < maxCachedRules {
		m := make(map[ruleKey]hitArgs, 1)
		if old != nil {
			m = maps.Clone(*old)
		}
		if _, ok := m[k]; !ok {
			m[k] = a
			s.rules.Store(&m)
		}
	}
	return a, nil
}

// args returns the script and arguments of a rule of key k, or an error
// for a rule the scripts do not compute (exactly).
func (k ruleKey) args() (hitArgs, error) {
	alg, most, w := k.alg, k.most, k.window
	sc := hitScripts[alg]
	if sc == nil {
		return hitArgs{}, fmt.Errorf("redis: %w: %q", driver.ErrAlgorithm, alg)
	}
	wc := ceilMS(w)
	if most < 1 || most > maxLimit || w <= 0 || wc > maxWindowMS {
		return hitArgs{}, fmt.Errorf("redis: %s rule of %d per %s is outside what the scripts count exactly (limit 1 to 2^48, window up to 2^48 ms)", alg, most, w)
	}
	switch alg {
	case "sliding":
		if w%time.Millisecond != 0 {
			return hitArgs{}, fmt.Errorf("redis: a sliding window must be whole milliseconds, got %s", w)
		}
		return hitArgs{sc, []any{most, wc}}, nil
	case "gcra":
		iv := k.interval
		if iv <= 0 {
			return hitArgs{}, fmt.Errorf("redis: a GCRA rule needs a positive interval, got %s", iv)
		}
		tq, tr := int64(iv/time.Millisecond), int64(iv%time.Millisecond)
		if tq > 0 && most > maxWindowMS/tq {
			return hitArgs{}, fmt.Errorf("redis: GCRA burst %d of %s spans more than 2^48 ms", most, iv)
		}
		return hitArgs{sc, []any{most, tq, tr, wc}}, nil
	}
	return hitArgs{sc, []any{most, wc}}, nil
}

// ceilMS is d in milliseconds, rounded up.
func ceilMS(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// AddHit queues one hit of weight n for key, counted if it fits rule's
// Room, with lease's hold and settlement if it is not the zero Lease (see
// driver.SharedCounters.AddHit); done runs once the batch carrying it has
// been answered (and, with WAITAOF, fsynced).
func (s *Store) AddHit(key string, rule driver.Rule, n int64, lease driver.Lease, done func(driver.Hit, error)) error {
	if _, err := s.hitArgs(rule); err != nil {
		return err
	}
	if n < 1 || n > maxLimit {
		return fmt.Errorf("redis: a hit's weight must be 1 to 2^48, got %d", n)
	}
	h := &commit.Hit{Key: key, Rule: rule, N: n, Held: lease.Held, Settled: lease.Settled, Adopted: lease.Adopted, Done: done}
	if lease.Settled > 0 || lease.Adopted > 0 {
		h.LeaseStart = lease.Start.UnixMilli()
	}
	return s.commit.Enqueue(commit.Op{Hit: h})
}

// PeekHit queues a read of key's state, advanced to the server's clock.
func (s *Store) PeekHit(key string, rule driver.Rule, done func(driver.Hit, error)) error {
	if _, err := s.hitArgs(rule); err != nil {
		return err
	}
	return s.commit.Enqueue(commit.Op{Peek: &commit.Hit{Key: key, Rule: rule, Done: done}})
}

// ResetHit queues the reset of key's live state (see
// driver.SharedCounters.ResetHit): it starts over at the server's now, or a
// millisecond after its old start if that is later.
func (s *Store) ResetHit(key string, done func(error)) error {
	return s.commit.Enqueue(commit.Op{Reset: &commit.Reset{Key: key}, Done: done})
}

// TakeBack queues the removal of n from key's count if its state is live
// and still the epoch that started at start.
func (s *Store) TakeBack(key string, start time.Time, n int64, done func(error)) error {
	return s.commit.Enqueue(commit.Op{TakeBack: &commit.TakeBack{Key: key, WindowStart: start.UnixMilli(), N: n}, Done: done})
}

// GiveBack queues the end of a lease's hold on key's hits (see
// driver.SharedCounters.GiveBack).
func (s *Store) GiveBack(key string, lease driver.Lease, done func(error)) error {
	tb := &commit.TakeBack{Key: key, WindowStart: lease.Start.UnixMilli(), N: lease.Held, Lease: true, Settled: lease.Settled}
	return s.commit.Enqueue(commit.Op{TakeBack: tb, Done: done})
}
