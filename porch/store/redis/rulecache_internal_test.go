package redis

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Open refuses a Ring: it routes a script call by its first key and loads
// scripts on one shard, so a batch's other keys, and every key after a
// reload, would be counted (or refused NOSCRIPT) on the wrong server.
func TestOpenRefusesARing(t *testing.T) {
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	s, err := Open(context.Background(), ring, Options{Timeout: 2 * time.Second})
	if err == nil {
		s.Close(context.Background())
		t.Fatal("Open accepted a Ring")
	}
	if !strings.Contains(err.Error(), "Ring") {
		t.Errorf("Open's error %q does not name the Ring", err)
	}
}

// taggedRule is a caller's own driver.Rule: porch's rule with metadata.
// Its type is comparable (an interface field), its values need not be.
type taggedRule struct {
	driver.Rule
	Tags any
}

// A program's own driver.Rule may be of a comparable type holding an
// unhashable value (an interface field holding a slice): kept as a map key
// it would panic. Arguments are kept by what the rule says, not by the rule.
func TestRuleOfAProgramsTypeWithUnhashableValue(t *testing.T) {
	s := openTest(t)
	rule := taggedRule{Rule: algorithm.MustRule(algorithm.Fixed, 5, time.Hour, 0), Tags: []string{"tenant-a"}}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("AddHit panicked: %v", p)
		}
	}()
	if h := hit(t, s, "rate:tagged:p:a", rule, 1); !h.Allowed {
		t.Errorf("first hit refused: %+v", h)
	}
}

// liveRule is a rule whose limit an operator changes at run time, by a
// pointer every limiter shares.
type liveRule struct{ limit atomic.Int64 }

func (r *liveRule) cur() driver.Rule {
	return algorithm.MustRule(algorithm.Fixed, r.limit.Load(), time.Hour, 0)
}
func (r *liveRule) Algorithm() string                                { return "fixed" }
func (r *liveRule) Window() time.Duration                            { return time.Hour }
func (r *liveRule) Interval() time.Duration                          { return 0 }
func (r *liveRule) Advance(s driver.State, t time.Time) driver.State { return r.cur().Advance(s, t) }
func (r *liveRule) Room(s driver.State, t time.Time) int64           { return r.cur().Room(s, t) }
func (r *liveRule) Expires(s driver.State) time.Time                 { return r.cur().Expires(s) }

// A program's rule behind a pointer may change: a cache keyed by the
// pointer would keep counting against the limit it first saw.
func TestRuleChangedUnderAPointerIsReadAgain(t *testing.T) {
	s := openTest(t)
	r := &liveRule{}
	r.limit.Store(1)
	if h := hit(t, s, "rate:live:p:a", r, 1); !h.Allowed {
		t.Fatalf("first hit refused: %+v", h)
	}
	r.limit.Store(10)
	if h := hit(t, s, "rate:live:p:a", r, 1); !h.Allowed {
		t.Errorf("second hit refused at limit 10 (count %d): the store used the cached limit 1", h.State.Count)
	}
}

// A hit reads its rule's arguments twice (queued, then sent): once kept,
// reading them again allocates nothing, for porch's rules as for a
// program's own, and a program making rules without end still gets each
// one's, past the cache's bound.
func TestRuleArgsKept(t *testing.T) {
	s := &Store{}
	rules := []driver.Rule{
		algorithm.MustRule(algorithm.Fixed, 5, time.Hour, 0),
		algorithm.MustRule(algorithm.Sliding, 5, time.Hour, 0),
		algorithm.MustRule(algorithm.GCRA, 5, time.Hour, 3),
		taggedRule{Rule: algorithm.MustRule(algorithm.Fixed, 7, time.Hour, 0), Tags: []string{"tenant-a"}},
	}
	for _, r := range rules {
		want, err := s.hitArgs(r)
		if err != nil {
			t.Fatalf("%s: %v", r.Algorithm(), err)
		}
		if n := testing.AllocsPerRun(100, func() {
			if got, _ := s.hitArgs(r); got.script != want.script || len(got.args) != len(want.args) {
				t.Fatalf("%s: kept arguments %v, want %v", r.Algorithm(), got.args, want.args)
			}
		}); n != 0 {
			t.Errorf("%s: reading kept arguments allocates %v times, want 0", r.Algorithm(), n)
		}
	}
	for limit := int64(1); limit <= maxCachedRules+10; limit++ {
		a, err := s.hitArgs(algorithm.MustRule(algorithm.Fixed, limit, time.Hour, 0))
		if err != nil || a.args[0] != limit {
			t.Fatalf("limit %d: arguments %v, %v; want the limit first", limit, a.args, err)
		}
	}
	if n := len(*s.rules.Load()); n != maxCachedRules {
		t.Errorf("%d rules kept, want the bound, %d", n, maxCachedRules)
	}
}
