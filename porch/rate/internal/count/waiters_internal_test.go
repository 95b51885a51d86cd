package count

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// flakyExclusive is an exclusive store whose committer, a goroutine of its
// own, settles each SaveCounter after a short, random delay, failing one
// write in every few: hits pile up as waiters on pending bound writes, and
// a failed write answers all of its waiters at once.
type flakyExclusive struct {
	writes chan flakyWrite
	failed atomic.Int64
	done   chan struct{}
}

type flakyWrite struct {
	c    driver.Counter
	done func(error)
}

var errFlaky = fmt.Errorf("flaky: the write failed")

func newFlakyExclusive(t *testing.T, failEvery int) *flakyExclusive {
	s := &flakyExclusive{writes: make(chan flakyWrite, 1<<16), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		rng := rand.New(rand.NewPCG(1, 2))
		for w := range s.writes {
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
			if rng.IntN(failEvery) == 0 {
				s.failed.Add(1)
				w.done(errFlaky)
				continue
			}
			w.done(nil)
		}
	}()
	t.Cleanup(func() { close(s.writes); <-s.done })
	return s
}

func (s *flakyExclusive) Wall() time.Time              { return t0 }
func (s *flakyExclusive) Now() time.Time               { return t0 }
func (s *flakyExclusive) Health(context.Context) error { return nil }
func (s *flakyExclusive) Stats() store.Stats           { return store.Stats{} }
func (s *flakyExclusive) Close(context.Context) error  { return nil }
func (s *flakyExclusive) ClaimPolicy(context.Context, driver.Policy) (func(), error) {
	return func() {}, nil
}
func (s *flakyExclusive) LoadCounters(context.Context, time.Time, func(driver.Counter)) error {
	return nil
}
func (s *flakyExclusive) SaveCounter(c driver.Counter, done func(error)) error {
	s.writes <- flakyWrite{c, done}
	return nil
}

// onceReplier records the answers to one hit; a second answer is a record
// given back while the hit still needed it.
type onceReplier struct {
	n     atomic.Int32
	v     Verdict
	start time.Time
	err   error
	got   chan struct{}
}

func (r *onceReplier) Reply(v Verdict, start time.Time, err error) {
	if r.n.Add(1) != 1 {
		return // counted: the test reports it
	}
	r.v, r.start, r.err = v, start, err
	close(r.got)
}

// The local counting's waiters are pooled records. Hits of many keys, on a store
// whose writes settle late and sometimes fail, must each be answered
// exactly once: with a verdict and no error once a write covering it
// committed, or with an error and no verdict (and no epoch to give back
// from) when it failed; and no key may be answered more allowed hits than
// its limit.
func TestLocalWaitersAnsweredOnce(t *testing.T) {
	for _, ahead := range []int64{0, 4, 256} {
		t.Run(fmt.Sprint("ahead ", ahead), func(t *testing.T) {
			const limit, keys, hits = 50, 7, 4000
			st := newFlakyExclusive(t, 6)
			pool := newPool(t, 2)
			cf := testConfig(t, pool, limit, time.Hour)
			e := open(t, pool, NewLocal(cf, st, "", ahead))
			rs := make([]*onceReplier, hits)
			keyOf := make([]string, hits)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := g; i < hits; i += 4 {
						r := &onceReplier{got: make(chan struct{})}
						rs[i], keyOf[i] = r, fmt.Sprintf("k%d", i%keys)
						key := keyOf[i]
						if err := pool.SendWait(key, func(shard int) { e.c.Hit(shard, key, 1, r) }); err != nil {
							t.Errorf("send: %v", err)
							close(r.got)
						}
					}
				})
			}
			wg.Wait()
			allowed := map[string]int{}
			for i, r := range rs {
				select {
				case <-r.got:
				case <-time.After(30 * time.Second):
					t.Fatalf("hit %d never answered", i)
				}
				switch {
				case r.err != nil && (r.v != Verdict{} || !r.start.IsZero()):
					t.Errorf("hit %d: error %v beside verdict %+v, start %v", i, r.err, r.v, r.start)
				case r.err == nil && r.v.Limit != limit:
					t.Errorf("hit %d: verdict %+v, want Limit %d", i, r.v, limit)
				case r.err == nil && r.v.Allowed:
					allowed[keyOf[i]]++
				}
			}
			// Late second answers, if any, have had time to come.
			time.Sleep(10 * time.Millisecond)
			for i, r := range rs {
				if n := r.n.Load(); n != 1 {
					t.Errorf("hit %d answered %d times", i, n)
				}
			}
			for k, n := range allowed {
				if n > limit {
					t.Errorf("%s: %d allowed, over the limit of %d", k, n, limit)
				}
			}
			if st.failed.Load() == 0 {
				t.Fatal("no write failed: the test did not test failures")
			}
			t.Logf("allowed %v, %d writes failed", allowed, st.failed.Load())
		})
	}
}
