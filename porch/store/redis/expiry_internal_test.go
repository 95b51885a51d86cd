package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// An allowed fixed or sliding hit may write only its count (see written in
// luaCommon); whichever write it makes, the key must end as the full
// write leaves it: the epoch's start, count and previous count the
// script answered, the window, and an expiry at the epoch's end (start +
// w, or + 2w for a sliding window) — never a reset's life (2w, or w for a
// sliding window's), nor an expiry set for a start the hit has moved on
// from. Each state below is written into Redis directly, on the server's
// clock, then hit once by each path a hit can take: its own script,
// luaBatch's direct body and luaBatch's view of a key hit twice.
func TestAllowedHitLeavesTheFullWritesState(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const w, limit = 60_000, 1000 // ms; a limit that is never reached
	type state struct {
		name string
		// set writes the key's state given the server's now (ms) and
		// the test's key.
		set func(t *testing.T, key string, now int64)
	}
	write := func(t *testing.T, key string, exp int64, fields ...any) {
		t.Helper()
		if err := s.c.HSet(ctx, key, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.c.PExpireAt(ctx, key, time.UnixMilli(exp)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reset := func(t *testing.T, key string) {
		t.Helper()
		if err := scriptReset.Run(ctx, s.c, []string{key}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	states := []state{
		{"fresh key", func(*testing.T, string, int64) {}},
		{"mid-epoch, expiring at its end", func(t *testing.T, key string, now int64) {
			st := now - w/2
			write(t, key, st+w, "s", st, "c", 3, "p", 0, "w", w, "l", 0, "ls", st)
		}},
		{"mid-epoch, sliding's expiry", func(t *testing.T, key string, now int64) {
			st := now - w/2
			write(t, key, st+2*w, "s", st, "c", 3, "p", 0, "w", w, "l", 0, "ls", st)
		}},
		{"reset with held hits (expires at 2w)", func(t *testing.T, key string, now int64) {
			st := now - w/2
			write(t, key, st+w, "s", st, "c", 5, "p", 0, "w", w, "l", 2, "ls", st)
			reset(t, key)
		}},
		{"reset without held hits (expires at w)", func(t *testing.T, key string, now int64) {
			st := now - w/2
			write(t, key, st+2*w, "s", st, "c", 5, "p", 0, "w", w, "l", 0, "ls", st)
			reset(t, key)
		}},
		{"window rolled over, alive for 2w", func(t *testing.T, key string, now int64) {
			st := now - w - 5
			write(t, key, st+2*w, "s", st, "c", 0, "p", 0, "w", w, "l", 0, "ls", st)
		}},
		{"window rolled over, alive till the next epoch's end", func(t *testing.T, key string, now int64) {
			// an expiry equal to the rolled epoch's end: only the start
			// tells the epochs apart
			st := now - w - 5
			write(t, key, st+w+2*w, "s", st, "c", 0, "p", 0, "w", w, "l", 0, "ls", st)
		}},
		{"another window's state", func(t *testing.T, key string, now int64) {
			st := now - 10
			write(t, key, st+w, "s", st, "c", 1, "p", 0, "w", w/2, "l", 0, "ls", st)
		}},
		{"no ls", func(t *testing.T, key string, now int64) {
			st := now - 10
			write(t, key, st+w, "s", st, "c", 1, "p", 0, "w", w)
		}},
	}
	type alg struct {
		name   string
		script *goredis.Script
		lives  int64 // the expiry's distance from the start, in windows
	}
	algs := []alg{{"fixed", scriptFixed, 1}, {"sliding", scriptSliding, 2}}
	// paths run one hit of n = 1 on key, or two on a view, and return the
	// last reply.
	paths := []struct {
		name string
		hits int // on the key
		run  func(t *testing.T, a alg, key string) []any
	}{
		{"script", 1, func(t *testing.T, a alg, key string) []any {
			return reply(t, a.script.Run(ctx, s.c, []string{key}, 1, limit, w))
		}},
		{"batch", 1, func(t *testing.T, a alg, key string) []any {
			other := key + ":other"
			r := reply(t, scriptBatch.Run(ctx, s.c, []string{other, key},
				batchCodes[a.script], 3, 1, limit, w, batchCodes[a.script], 3, 1, limit, w))
			return r[5:]
		}},
		{"view", 2, func(t *testing.T, a alg, key string) []any {
			c := viewCodes[a.script]
			r := reply(t, scriptBatch.Run(ctx, s.c, []string{key, key}, c, 3, 1, limit, w, c, 3, 1, limit, w))
			return r[5:]
		}},
	}
	for _, a := range algs {
		for _, p := range paths {
			for i, st := range states {
				t.Run(fmt.Sprintf("%s/%s/%s", a.name, p.name, st.name), func(t *testing.T) {
					key := s.counterKey(fmt.Sprintf("rate:expiry:p:%s-%s-%d", a.name, p.name, i))
					now, err := s.c.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					st.set(t, key, now.UnixMilli())
					was, err := s.c.HMGet(ctx, key, "s", "c", "p").Result()
					if err != nil {
						t.Fatal(err)
					}
					r := p.run(t, a, key)
					if r[0].(int64) != 1 {
						t.Fatalf("refused: %v", r)
					}
					start, count, prev := r[1].(int64), r[2].(int64), r[3].(int64)
					// the reply is the serial run's: the rule's epochs at
					// the script's now, counted from the state set
					ws, wc, wp := epoch(a.name, was, r[4].(int64), w)
					if want := []int64{ws, wc + int64(p.hits), wp}; start != want[0] || count != want[1] || prev != want[2] {
						t.Errorf("answered start %d count %d prev %d, want %v (state was %v)", start, count, prev, want, was)
					}
					h, err := s.c.HMGet(ctx, key, "s", "c", "p", "w").Result()
					if err != nil {
						t.Fatal(err)
					}
					want := []string{fmt.Sprint(start), fmt.Sprint(count), fmt.Sprint(prev), fmt.Sprint(w)}
					for j, f := range []string{"s", "c", "p", "w"} {
						if h[j] != want[j] {
							t.Errorf("field %s = %v, want %s (reply %v)", f, h[j], want[j], r)
						}
					}
					exp, err := s.c.PExpireTime(ctx, key).Result()
					if err != nil {
						t.Fatal(err)
					}
					if want := start + a.lives*w; exp.Milliseconds() != want {
						t.Errorf("expires at %d, want %d (start %d + %d×%d): off by %d ms", exp.Milliseconds(), want, start, a.lives, w, exp.Milliseconds()-want)
					}
				})
			}
		}
	}
}

// epoch is the start, count and previous count of the fixed or sliding
// window a state (was: its s, c and p, nil where absent) is in at now.
func epoch(alg string, was []any, now, w int64) (s, c, p int64) {
	num := func(v any) int64 {
		var n int64
		if v != nil {
			fmt.Sscan(v.(string), &n)
		}
		return n
	}
	if was[0] == nil {
		return now, 0, 0
	}
	s, c, p = num(was[0]), num(was[1]), num(was[2])
	switch e := now - s; {
	case e < w && alg == "fixed":
		return s, c, 0
	case e < w:
		return s, c, p
	case e < 2*w && alg == "sliding":
		return s + w, 0, c
	}
	return now, 0, 0
}

// reply is a script's reply as a slice, failing t on an error.
func reply(t *testing.T, c *goredis.Cmd) []any {
	t.Helper()
	v, err := c.Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		if e, ok := x.(error); ok {
			t.Fatalf("reply %d: %v", i, e)
		}
	}
	return v
}
