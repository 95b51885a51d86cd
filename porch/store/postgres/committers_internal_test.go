package postgres

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// opLog records, per key, which committer saw each of its ops, in the
// order that committer's batches carried them.
type opLog struct {
	mu  sync.Mutex
	ops map[string][]string // key → "committer:kind"
}

func (l *opLog) writer(i int) commit.Writer {
	return func(batch []commit.Op) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, o := range batch {
			var key, kind string
			switch {
			case o.Hit != nil:
				key, kind = o.Hit.Key, "hit"
			case o.Peek != nil:
				key, kind = o.Peek.Key, "peek"
			case o.Reset != nil:
				key, kind = o.Reset.Key, "reset"
			case o.TakeBack != nil:
				key, kind = o.TakeBack.Key, "takeback"
			default:
				continue
			}
			l.ops[key] = append(l.ops[key], fmt.Sprintf("%d:%s", i, kind))
		}
		return nil
	}
}

// Every op of one key goes to one committer, and reaches it in the order it
// was queued, however many goroutines queue ops of other keys meanwhile:
// per-key order is what store.SharedCounters promises. Keys spread over
// more than one committer (else there is no overlap to gain).
func TestOneKeysOpsGoToOneCommitter(t *testing.T) {
	const n, keys, rounds = 4, 256, 8
	l := &opLog{ops: make(map[string][]string)}
	p := &Store{seed: maphash.MakeSeed()}
	for i := range n {
		p.cs = append(p.cs, commit.New(l.writer(i), clock.System{}, 64, 16, nil))
	}
	rule := fixed(1<<40, time.Hour)
	ignore := func(store.Hit, error) {}
	kinds := []string{"hit", "reset", "hit", "takeback", "peek", "hit"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for k := g; k < keys; k += 8 {
					key := fmt.Sprintf("rate:t:k%d", k)
					var err error
					switch kinds[r%len(kinds)] {
					case "hit":
						err = p.AddHit(key, rule, 1, ignore)
					case "reset":
						err = p.ResetHit(key, func(error) {})
					case "takeback":
						err = p.TakeBack(key, time.UnixMilli(0), 1, func(error) {})
					case "peek":
						err = p.PeekHit(key, rule, ignore)
					}
					if err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := eachCommitter(p.cs, func(c *commit.Committer) error { return c.Close(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	used := map[byte]bool{}
	for k := range keys {
		key := fmt.Sprintf("rate:t:k%d", k)
		got := l.ops[key]
		if len(got) != rounds {
			t.Fatalf("%s: %d ops committed, want %d", key, len(got), rounds)
		}
		var want []string
		for r := range rounds {
			want = append(want, fmt.Sprintf("%c:%s", got[0][0], kinds[r%len(kinds)]))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: committed as %v, want every op on one committer in queued order %v", key, got, want)
		}
		used[got[0][0]] = true
	}
	if len(used) < 2 {
		t.Errorf("%d keys all went to %d committer(s) of %d", keys, len(used), n)
	}
}

// On PostgreSQL: a reset queued before a hit of the same key, neither
// waited for, is committed before it, and so is a take-back, while other
// goroutines do the same to other keys. If one key's ops could land on two
// committers, the hit's batch would now and then commit first and count
// on top of the old window.
func TestResetAndTakeBackThenHitKeepTheirOrder(t *testing.T) {
	p := openInternal(t, pgtest.DSN(t), store.Options{})
	if len(p.cs) < 2 {
		t.Skip("one committer")
	}
	rule := fixed(1<<40, time.Hour)
	type res struct {
		h   store.Hit
		err error
	}
	hit := func(key string) chan res {
		ch := make(chan res, 1)
		if err := p.AddHit(key, rule, 1, func(h store.Hit, err error) { ch <- res{h, err} }); err != nil {
			ch <- res{err: err}
		}
		return ch
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 10 {
				key := fmt.Sprintf("rate:t:order:%d:%d", g, r)
				var last res
				for range 3 {
					if last = <-hit(key); last.err != nil {
						t.Error(last.err)
						return
					}
				}
				// Queued back to back, answered later.
				if err := p.TakeBack(key, last.h.State.Start, 3, func(error) {}); err != nil {
					t.Error(err)
					return
				}
				if got := <-hit(key); got.err != nil || got.h.State.Count != 1 {
					t.Errorf("%s: a hit queued after taking back 3 of 3: count %d (%v), want 1", key, got.h.State.Count, got.err)
				}
				if err := p.ResetHit(key, func(error) {}); err != nil {
					t.Error(err)
					return
				}
				if got := <-hit(key); got.err != nil || got.h.State.Count != 1 {
					t.Errorf("%s: a hit queued after a reset: count %d (%v), want 1", key, got.h.State.Count, got.err)
				}
			}
		}()
	}
	wg.Wait()
}
