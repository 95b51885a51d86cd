package actor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
)

// newPool starts a pool that is closed when the test ends.
func newPool(t *testing.T, opt porch.PoolOptions) *actor.Pool {
	t.Helper()
	p := actor.Of(porch.NewPool(opt))
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return p
}

// blockActor parks key's actor on a job until the returned release is
// called (release is idempotent and also runs at cleanup, before the pool is
// closed). When blockActor returns the actor is inside that job, so its
// mailbox is empty.
func blockActor(t *testing.T, p *actor.Pool, key string) (release func()) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	if err := p.Send(key, func(int) { close(started); <-unblock }); err != nil {
		t.Fatalf("send blocking job: %v", err)
	}
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	return release
}

// promptly runs f and fails the test if it has not returned within a
// generous bound: what it guards must not block at all, and a blocking
// implementation should fail rather than hang the suite.
func promptly(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

func TestNewPoolDefaults(t *testing.T) {
	p := newPool(t, porch.PoolOptions{})
	if got := p.Size(); got != actor.DefaultSize {
		t.Errorf("got Size %d, want %d", got, actor.DefaultSize)
	}
	if got := p.Mailbox(); got != actor.DefaultMailbox {
		t.Errorf("got Mailbox %d, want %d", got, actor.DefaultMailbox)
	}
}

func TestNewPoolPanicsOnBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  porch.PoolOptions
	}{
		{"negative size", porch.PoolOptions{Size: -1}},
		{"negative mailbox", porch.PoolOptions{Mailbox: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				v := recover()
				if msg, _ := v.(string); !strings.HasPrefix(msg, "porch: ") {
					t.Errorf("got panic %v, want a message prefixed %q", v, "porch: ")
				}
			}()
			p := actor.Of(porch.NewPool(tt.opt))
			p.Close(context.Background())
		})
	}
}

func TestPoolOrdersJobsPerKey(t *testing.T) {
	const keys, jobs = 32, 200
	// The mailboxes hold every job, so no Send can be refused.
	p := actor.Of(porch.NewPool(porch.PoolOptions{Size: 4, Mailbox: keys * jobs}))

	// seen[k] and shards[k] are written only by key k's actor: if two actors
	// ever ran jobs of one key, the race detector would report it.
	seen := make([][]int, keys)
	shards := make([][]int, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("client-%d", k)
			for i := range jobs {
				err := p.Send(key, func(shard int) {
					seen[k] = append(seen[k], i)
					shards[k] = append(shards[k], shard)
				})
				if err != nil {
					t.Errorf("send %s job %d: %v", key, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil { // drains every mailbox
		t.Fatalf("close: %v", err)
	}

	want := make([]int, jobs)
	for i := range want {
		want[i] = i
	}
	for k := range keys {
		if !slices.Equal(seen[k], want) {
			t.Errorf("client-%d: got jobs in order %v, want 0..%d in order", k, seen[k], jobs-1)
		}
		wantShard := p.Shard(fmt.Sprintf("client-%d", k))
		for _, s := range shards[k] {
			if s != wantShard {
				t.Errorf("client-%d: a job ran on shard %d, want %d", k, s, wantShard)
				break
			}
		}
	}
}

func TestPoolShard(t *testing.T) {
	const size = 8
	p := newPool(t, porch.PoolOptions{Size: size})
	used := make(map[int]bool)
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		s := p.Shard(key)
		if s < 0 || s >= size {
			t.Fatalf("got Shard(%q) = %d, want in [0, %d)", key, s, size)
		}
		if again := p.Shard(key); again != s {
			t.Fatalf("got Shard(%q) = %d then %d, want the same shard every time", key, s, again)
		}
		used[s] = true
	}
	// Concurrency across keys is the pool's point: keys must spread.
	if len(used) != size {
		t.Errorf("got 1000 keys on %d shards, want all %d used", len(used), size)
	}

	for _, key := range []string{"a", "b", "c"} {
		got, err := call(context.Background(), p, key, func(shard int, r actor.Reply[int]) {
			r.Send(shard, nil)
		})
		if err != nil {
			t.Fatalf("call %q: %v", key, err)
		}
		if want := p.Shard(key); got != want {
			t.Errorf("job for %q ran on shard %d, want Shard = %d", key, got, want)
		}
	}
}

func TestPoolFullMailboxIsSaturated(t *testing.T) {
	p := newPool(t, porch.PoolOptions{Size: 1, Mailbox: 2})
	blockActor(t, p, "k")
	for i := range p.Mailbox() {
		if err := p.Send("k", func(int) {}); err != nil {
			t.Fatalf("send %d into a mailbox with room: %v", i, err)
		}
	}

	refused := func(int) { t.Error("a job whose Send was refused ran") }
	var sendErr, otherErr, callErr error
	promptly(t, "Send into a full mailbox", func() {
		sendErr = p.Send("k", refused)
		otherErr = p.Send("other key, same (only) actor", refused)
		_, callErr = call(context.Background(), p, "k", func(int, actor.Reply[int]) { refused(0) })
	})
	for _, got := range []error{sendErr, otherErr, callErr} {
		if !errors.Is(got, porch.ErrSaturated) {
			t.Errorf("got %v, want ErrSaturated", got)
		}
	}
}

func TestPoolCloseDrainsThenRefuses(t *testing.T) {
	p := actor.Of(porch.NewPool(porch.PoolOptions{Size: 1, Mailbox: 8}))
	release := blockActor(t, p, "k")
	var ran []int // touched by the actor only; read after Close returns
	for i := range 5 {
		if err := p.Send("k", func(int) { ran = append(ran, i) }); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	// With the actor still blocked, Close begins, cannot finish, and honours
	// its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got Close(cancelled ctx) = %v, want context.Canceled", err)
	}
	if err := p.Send("k", func(int) { t.Error("job sent after Close ran") }); !errors.Is(err, porch.ErrClosed) {
		t.Errorf("got Send after Close = %v, want ErrClosed", err)
	}
	_, err := call(context.Background(), p, "k", func(int, actor.Reply[int]) {})
	if !errors.Is(err, porch.ErrClosed) {
		t.Errorf("got a round trip after Close = %v, want ErrClosed", err)
	}

	release()
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(ran, want) {
		t.Errorf("got queued jobs run %v, want %v", ran, want)
	}
}

func TestReplyWaitHonoursContext(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (ctx context.Context, cancel func())
		want error
	}{
		{
			name: "cancelled while waiting",
			ctx:  func() (context.Context, func()) { return context.WithCancel(context.Background()) },
			want: context.Canceled,
		},
		{
			name: "deadline passed",
			ctx: func() (context.Context, func()) {
				return context.WithDeadline(context.Background(), time.Unix(0, 0))
			},
			want: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, porch.PoolOptions{Size: 1})
			ctx, cancel := tt.ctx()
			defer cancel()
			kept := make(chan actor.Reply[string], 1)
			// The job never answers in time: it keeps the reply and ends the
			// caller's context, so only the context can end the wait.
			var got string
			var err error
			promptly(t, "Wait after its context ended", func() {
				got, err = call(ctx, p, "k", func(_ int, r actor.Reply[string]) {
					kept <- r
					cancel()
				})
			})
			if !errors.Is(err, tt.want) {
				t.Errorf("got err %v, want %v", err, tt.want)
			}
			if got != "" {
				t.Errorf("got value %q, want the zero value", got)
			}
			// Answering a caller that has gone must not block the actor.
			r := <-kept
			promptly(t, "Reply.Send after the caller left", func() { r.Send("late", nil) })
		})
	}
}

func TestReplyFromAnotherGoroutine(t *testing.T) {
	errLate := errors.New("late failure")
	tests := []struct {
		name    string
		value   int
		err     error
		wantErr error
	}{
		{"value", 42, nil, nil},
		{"error", 0, errLate, errLate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, porch.PoolOptions{Size: 2})
			kept := make(chan actor.Reply[int], 1)
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				r := <-kept // the actor has long returned by now
				r.Send(tt.value, tt.err)
			}()
			got, err := call(context.Background(), p, "k", func(_ int, r actor.Reply[int]) {
				kept <- r
			})
			<-answered
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("got err %v, want %v", err, tt.wantErr)
			}
			if got != tt.value {
				t.Errorf("got %d, want %d", got, tt.value)
			}
		})
	}
}

func TestPoolSendWaitWaitsForRoom(t *testing.T) {
	p := newPool(t, porch.PoolOptions{Size: 1, Mailbox: 1})
	release := blockActor(t, p, "k")
	if err := p.Send("k", func(int) {}); err != nil {
		t.Fatalf("fill mailbox: %v", err)
	}
	ran := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- p.SendWait("k", func(int) { close(ran) }) }()
	release()
	if err := <-sent; err != nil {
		t.Fatalf("got SendWait = %v, want nil once the mailbox had room", err)
	}
	<-ran
}

// waitParked returns once some goroutine is blocked on a channel inside fn (a
// function name as it appears in a stack trace). Nothing the test can
// receive from tells it that a send has parked, so it reads the stacks.
func waitParked(t *testing.T, fn string) {
	t.Helper()
	testkit.WaitStack(t, 10*time.Second, "a goroutine parked in "+fn, func(g string) bool {
		blocked := strings.Contains(g, "[chan send") || strings.Contains(g, "[select")
		return blocked && strings.Contains(g, fn)
	})
}

func TestPoolCloseHonoursContextWhileSendWaitParked(t *testing.T) {
	p := actor.Of(porch.NewPool(porch.PoolOptions{Size: 1, Mailbox: 1}))
	blockActor(t, p, "k") // a slow actor: its mailbox will not drain
	if err := p.Send("k", func(int) {}); err != nil {
		t.Fatalf("fill mailbox: %v", err)
	}
	parked := make(chan error, 1)
	go func() { parked <- p.SendWait("k", func(int) {}) }()
	waitParked(t, "(*Pool).SendWait")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	promptly(t, "Close(cancelled ctx) with a SendWait parked", func() { err = p.Close(ctx) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got Close = %v, want context.Canceled", err)
	}
	// Admission must stay fail-fast while Close waits for the actor.
	promptly(t, "Send during Close", func() { err = p.Send("k", func(int) {}) })
	if !errors.Is(err, porch.ErrClosed) {
		t.Errorf("got Send during Close = %v, want ErrClosed", err)
	}
}

// call is the round trip rate and idem make: send key's actor a job that
// answers a Reply, now or later, and wait for the answer under ctx.
func call[T any](ctx context.Context, p *actor.Pool, key string, job func(shard int, r actor.Reply[T])) (T, error) {
	r := actor.NewReply[T]()
	if err := p.Send(key, func(shard int) { job(shard, r) }); err != nil {
		var zero T
		return zero, err
	}
	return r.Wait(ctx)
}
