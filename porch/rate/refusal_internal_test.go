package rate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
)

// onActor runs fn on shard's actor and waits for it.
func onActor(t *testing.T, pool *porch.Pool, shard int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	if err := actor.Of(pool).SendShard(shard, true, func(int) { fn(); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
}

// A burst of refused keys that fills a shard of the refusal cache to
// maxRefusals must not switch the cache off for good once those entries
// have expired: a shard full of expired entries is swept when the next
// refusal is remembered. Otherwise one burst of many keys (an IPv6 /64
// spray) leaves every later refused key costing the database a round
// trip, forever, and the expired entries are held in memory forever.
func TestRefusalCacheRecoversAfterAFullBurst(t *testing.T) {
	pool := porch.NewPool(porch.PoolOptions{Size: 1})
	t.Cleanup(func() { pool.Close(context.Background()) })
	const life = time.Second
	c := newRefusals(actor.Of(pool), life)
	v := Verdict{Limit: 1}
	for i := 0; i < maxRefusals+10; i++ {
		if i%512 == 0 {
			onActor(t, pool, 0, func() {}) // drain, so no remember is dropped
		}
		c.remember(0, "k"+strconv.Itoa(i), 1, time.Now(), 0, time.Hour, v)
	}
	onActor(t, pool, 0, func() {})
	time.Sleep(life + 100*time.Millisecond) // every entry has expired
	c.remember(0, "fresh", 1, time.Now(), 0, time.Hour, v)
	var found bool
	var held int
	onActor(t, pool, 0, func() {
		_, found = c.lookup(0, "fresh", 1, time.Now())
		held = len(c.shards[0].m)
	})
	if !found {
		t.Fatalf("after a full burst expired, a new refusal was not remembered (shard holds %d entries, all expired): the cache is off for good", held)
	}
}
