package inflight

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store/memory"
)

// rig is a limiter on a one-actor pool whose actor a test can block.
func rig(t *testing.T, limit, mailbox int) (*Limiter, *actor.Pool) {
	t.Helper()
	st, err := memory.Open()
	if err != nil {
		t.Fatal(err)
	}
	pool := porch.NewPool(porch.PoolOptions{Size: 1, Mailbox: mailbox})
	t.Cleanup(func() { pool.Close(context.Background()); st.Close(context.Background()) })
	return New(pool, st, limit, Options{}), actor.Of(pool)
}

// block parks the pool's one actor until the returned func is called.
func block(t *testing.T, p *actor.Pool) (unblock func()) {
	t.Helper()
	parked, release := make(chan struct{}), make(chan struct{})
	if err := p.Send("", func(int) { close(parked); <-release }); err != nil {
		t.Fatal(err)
	}
	<-parked
	return func() { close(release) }
}

// held reads key's count on its actor.
func (l *Limiter) heldOf(t *testing.T, key string) int64 {
	t.Helper()
	lc := l.slots.(*local)
	got := make(chan int64, 1)
	if err := lc.pool.SendWait(key, func(shard int) { got <- lc.held[shard][key] }); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// A caller that stops waiting before its actor answered takes no slot,
// whether the actor then grants or not: the key's count is back to zero.
func TestAbandonedAcquireHoldsNoSlot(t *testing.T) {
	l, p := rig(t, 1, 8)
	unblock := block(t, p)
	// The actor is parked, so the acquire's job waits in its mailbox
	// while the caller, whose context has ended, gives up on it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Acquire(ctx, "alice"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	unblock()
	if n := l.heldOf(t, l.prefix+"p:alice"); n != 0 {
		t.Fatalf("after an abandoned acquire the key holds %d slots, want 0", n)
	}
}

// A full mailbox on acquire answers 503 with Retry-After (fail closed);
// a give-back waits for room and is never lost.
func TestSaturatedPool(t *testing.T) {
	l, p := rig(t, 1, 1)
	release, err := l.Acquire(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	unblock := block(t, p)
	if err := p.Send("", func(int) {}); err != nil { // the one-job mailbox is full
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("on a full mailbox: status %d, Retry-After %q; want 503 with one", w.Code, w.Header().Get("Retry-After"))
	}
	released := make(chan struct{})
	go func() { release(); close(released) }() // waits for room
	unblock()
	<-released
	if n := l.heldOf(t, l.prefix+"p:alice"); n != 0 {
		t.Fatalf("after a give-back sent to a full mailbox the key holds %d slots, want 0", n)
	}
}

// An acquire the actor grants at the instant the caller's context ends:
// the actor grants, and the very next job on it cancels the caller's
// context, so the caller finds both its answer and its context's end
// ready. Whichever it takes, no slot outlives the call: a caller told of
// the slot gives it back, and one that returns ctx.Err() has it given
// back for it.
func TestLocalGrantedAsContextEnds(t *testing.T) {
	l, p := rig(t, 1, 8)
	key := l.prefix + "p:alice"
	var granted, ended int
	for range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		unblock := block(t, p)
		type result struct {
			release func()
			err     error
		}
		res := make(chan result, 1)
		go func() {
			rel, err := l.Acquire(ctx, "alice")
			res <- result{rel, err}
		}()
		// The acquire's job is queued behind the block; queue the
		// cancel behind it.
		testkit.WaitStack(t, 10*time.Second, "the acquire waiting for its actor", func(s string) bool {
			return strings.Contains(s, "inflight.(*local).acquire(")
		})
		if err := p.Send("", func(int) { cancel() }); err != nil {
			t.Fatal(err)
		}
		unblock()
		r := <-res
		switch {
		case r.err == nil:
			granted++
			r.release()
		case errors.Is(r.err, context.Canceled):
			ended++
		default:
			t.Fatalf("Acquire: %v", r.err)
		}
		if n := l.heldOf(t, key); n != 0 {
			t.Fatalf("after the call the key holds %d slots, want 0", n)
		}
		cancel()
	}
	t.Logf("granted %d, context ended %d", granted, ended)
}
