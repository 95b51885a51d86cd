package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// TestAttackRingBatchCountsOnFirstKeysShard: Open takes any
// goredis.UniversalClient, a *goredis.Ring included (it is not a
// ClusterClient, so luaBatch is used). A Ring routes EVALSHA by its first
// key: a luaBatch run of hits of keys on two shards runs whole on the
// first key's shard, so the other key's count lands where nothing routed
// by that key (a later hit alone, a Reset, a TakeBack) ever reads it.
// Before luaBatch each hit was its own single-key script, routed to its
// key's shard.
func TestAttackRingBatchCountsOnFirstKeysShard(t *testing.T) {
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	ctx := context.Background()
	s, err := Open(ctx, ring, Options{Options: store.Options{CommitDelay: 200 * time.Millisecond}, Timeout: 2 * time.Second})
	if err != nil {
		t.Skipf("Open on a Ring: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	// Two keys that the ring puts on different shards.
	shardOf := func(k string) string {
		cl, err := ring.GetShardClientForKey(s.counterKey(k))
		if err != nil {
			t.Fatal(err)
		}
		return cl.Options().Addr
	}
	k1 := "rate:f:p:one"
	var k2 string
	for i := range 1000 {
		k := fmt.Sprintf("rate:f:p:two%d", i)
		if shardOf(k) != shardOf(k1) {
			k2 = k
			break
		}
	}
	if k2 == "" {
		t.Fatal("no key on the other shard")
	}
	rule := algorithm.MustRule(algorithm.Fixed, 1, time.Hour, 0)
	// A peek holds the committer (CommitDelay) so that both hits share
	// the next batch, as concurrent clients' hits do.
	first := make(chan error, 1)
	if err := s.PeekHit("rate:f:p:hold", rule, func(_ driver.Hit, err error) { first <- err }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	type answer struct {
		h   driver.Hit
		err error
	}
	ch1, ch2 := make(chan answer, 1), make(chan answer, 1)
	if err := s.AddHit(k1, rule, 1, func(h driver.Hit, err error) { ch1 <- answer{h, err} }); err != nil {
		t.Fatal(err)
	}
	if err := s.AddHit(k2, rule, 1, func(h driver.Hit, err error) { ch2 <- answer{h, err} }); err != nil {
		t.Fatal(err)
	}
	<-first
	a1, a2 := <-ch1, <-ch2
	if a1.err != nil || a2.err != nil || !a1.h.Allowed || !a2.h.Allowed {
		t.Fatalf("first hits: %+v %+v", a1, a2)
	}
	// Each key's count must be on the shard its key routes to.
	for _, k := range []string{k1, k2} {
		if c, err := ring.HGet(ctx, s.counterKey(k), "c").Result(); err != nil || c != "1" {
			t.Errorf("%s: count on its shard %s: %q, %v; want 1 (counted on the other shard)", k, shardOf(k), c, err)
		}
	}
	// And so the limit of 1 is exceeded: a lone hit of k2 goes to its
	// own shard, finds nothing, and is allowed again.
	if h := hit(t, s, k2, rule, 1); h.Allowed {
		t.Errorf("%s: second hit allowed at limit 1 (count %d): a lost count", k2, h.State.Count)
	}
}

// taggedRule is a caller's own driver.Rule: porch's rule with metadata.
// Its type is comparable (an interface field), its values need not be.
type taggedRule struct {
	driver.Rule
	Tags any
}

// TestAttackRuleCacheUnhashable: hitArgs checks that the rule's type is
// comparable, not that the value is hashable; a struct with an interface
// field holding a slice passes the check and panics in sync.Map. Before
// the cache, any driver.Rule worked.
func TestAttackRuleCacheUnhashable(t *testing.T) {
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

// TestAttackRuleCacheStalePointerRule: the cache keys a pointer rule by
// its address, so a limit changed behind it is never seen again: the
// store keeps counting against the limit it first saw.
func TestAttackRuleCacheStalePointerRule(t *testing.T) {
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
