package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// Idempotency keys never live in Redis: the store must not offer them.
func TestNotKeys(t *testing.T) {
	if _, ok := any((*redis.Store)(nil)).(store.Keys); ok {
		t.Fatal("*redis.Store is a store.Keys; idempotency keys must never live in Redis")
	}
	if _, ok := any((*redis.Store)(nil)).(store.Counters); !ok {
		t.Fatal("*redis.Store is not a store.Counters")
	}
	if _, ok := any((*redis.Store)(nil)).(driver.SharedCounters); !ok {
		t.Fatal("*redis.Store does not implement driver.SharedCounters")
	}
}

// What TestNotKeys checks of the type, a program meets as a compile error
// at each place that takes keys, and nowhere else: the program below
// builds but for the lines marked "refused". It is laid over the module
// with go build -overlay, so nothing is written into the tree.
func TestKeysOnRedisDoNotCompile(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	const src = `package main

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/redis"
)

func main() {
	pool := porch.NewPool(porch.PoolOptions{})
	st, err := redis.Open(context.Background(), goredis.NewClient(&goredis.Options{}), redis.Options{})
	_, _ = rate.New(pool, st, 10, 1, rate.Options{})
	_ = kit.New(pool, st, nil)
	_ = idem.New(pool, st, idem.Options{}) // refused
	_ = kit.New(pool, st, st)              // refused
	_, _ = kit.Open(st, err)               // refused
}
`
	want := map[int]bool{}
	for i, line := range strings.Split(src, "\n") {
		if strings.HasSuffix(line, "// refused") {
			want[i+1] = true
		}
	}
	root, err := filepath.Abs("../../..") // the module root
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "main.go")
	if err := os.WriteFile(prog, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "internal", "redisprobe", "main.go"): prog},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-overlay", overlayFile, "-o", os.DevNull, "./internal/redisprobe")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go build of a program giving *redis.Store to idem.New, kit.New's keys and kit.Open: built, want errors\n%s", out)
	}
	got := map[int]bool{}
	for _, m := range regexp.MustCompile(`main\.go:(\d+):\d+: `).FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("go build failed on lines %v, want exactly the lines marked refused, %v:\n%s", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)), out)
	}
}

func client(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func open(t *testing.T, c goredis.UniversalClient, opt redis.Options) *redis.Store {
	t.Helper()
	st, err := redis.Open(context.Background(), c, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

// A server that forgets counts on a crash is refused when the caller
// requires durability, naming the setting to change.
func TestRequireDurableRefusesDefaultServer(t *testing.T) {
	srv := redistest.StartServer(t) // appendonly no
	_, err := redis.Open(context.Background(), client(t, srv.Addr), redis.Options{RequireDurable: true})
	if !errors.Is(err, redis.ErrNotDurable) {
		t.Fatalf("Open with RequireDurable on appendonly no: %v, want ErrNotDurable", err)
	}
	if !strings.Contains(err.Error(), "appendfsync always") || !strings.Contains(err.Error(), "appendonly=no") {
		t.Errorf("error %q should name the settings", err)
	}
	srv2 := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	if _, err := redis.Open(context.Background(), client(t, srv2.Addr), redis.Options{RequireDurable: true}); !errors.Is(err, redis.ErrNotDurable) {
		t.Fatalf("Open with RequireDurable on appendfsync everysec (Redis before 7.2 has no WAITAOF): %v, want ErrNotDurable", err)
	}
}

// allowRetry counts one request, retrying while the store fails (a
// restarted server's dead pooled connections), for up to 10s.
func allowRetry(t *testing.T, l *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := l.Allow(ctx, principal)
		cancel()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("Allow(%q): %v", principal, err)
		}
		time.Sleep(20 * time.Millisecond) // the client redials on the next try
	}
}

// A client counted to its limit on appendonly yes + appendfsync always is
// still limited after the server is killed with SIGKILL and restarted.
func TestDurableAcrossKill9(t *testing.T) {
	srv := redistest.StartDurableServer(t)
	st := open(t, client(t, srv.Addr), redis.Options{RequireDurable: true})
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() { pool.Close(context.Background()) })
	const limit = 5
	l, err := rate.New(pool, st, limit, time.Hour, rate.Options{Name: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	for i := range limit {
		if v := allowRetry(t, l, "alice"); !v.Allowed {
			t.Fatalf("request %d: refused before the limit", i+1)
		}
	}
	srv.Kill9()
	srv.Restart()
	if v := allowRetry(t, l, "alice"); v.Allowed {
		t.Fatalf("after kill -9 and restart: allowed (%+v); the counts were lost", v)
	}
	if v := allowRetry(t, l, "bob"); !v.Allowed {
		t.Fatalf("another client after the restart: refused (%+v)", v)
	}
}

// addHit waits for one AddHit's outcome.
func addHit(st *redis.Store, key string, rule driver.Rule) (driver.Hit, error) {
	type answer struct {
		h   driver.Hit
		err error
	}
	ch := make(chan answer, 1)
	if err := st.AddHit(key, rule, 1, driver.Lease{}, func(h driver.Hit, err error) { ch <- answer{h, err} }); err != nil {
		return driver.Hit{}, err
	}
	a := <-ch
	return a.h, a.err
}

// A server that stops answering fails hits closed within Timeout, and
// Health says so; once it answers again, the same store counts again.
func TestFailClosed(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := redistest.StartServer(t)
	st := open(t, client(t, srv.Addr), redis.Options{Timeout: timeout})
	rule := algorithm.MustRule(algorithm.Fixed, 100, time.Hour, 0)
	if _, err := addHit(st, "rate:x:p:a", rule); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		began := time.Now()
		h, err := addHit(st, "rate:x:p:a", rule)
		if err == nil {
			t.Fatalf("%s: hit answered %+v, want an error", what, h)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// The middlewares' fail-closed answer would call it a request
			// that ended, and neither log it nor say the store failed.
			t.Errorf("%s: hit error %v wraps a context error; want a store failure", what, err)
		}
		if took := time.Since(began); took > timeout+500*time.Millisecond {
			t.Errorf("%s: the error took %s, want about Timeout (%s)", what, took, timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.Health(ctx); !errors.Is(err, store.ErrUnhealthy) {
			t.Errorf("%s: Health %v, want store.ErrUnhealthy", what, err)
		}
	}
	srv.Pause() // connections open, no reply: only the timeout can tell
	check("server paused")
	srv.Resume()
	srv.Kill9()
	check("server killed")
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := addHit(st, "rate:x:p:a", rule)
		if err == nil {
			if !h.Allowed {
				t.Fatalf("after the restart: refused %+v", h)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server is back but hits still fail: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the client redials on the next try
	}
	if err := st.Health(context.Background()); err != nil {
		t.Errorf("Health after the server came back: %v", err)
	}
}
