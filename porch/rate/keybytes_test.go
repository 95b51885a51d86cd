package rate_test

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// principalPrefix is what the default limiter puts before a principal
// in its counter key.
const principalPrefix = "rate:default:p:"

// hostileKeys are principals a text column, its index or a UTF-8 check
// refuses, and principals whose counter keys differ only far in, or are
// 256 and 257 bytes long (PostgreSQL stores the one as it is and hashes
// the other): each must count on its own, exactly.
func hostileKeys() []string {
	long := incompressible(10 << 10)
	return []string{
		"\xff",
		"a\x00b",
		"\x00",
		"\xc3\x28",         // a 2-byte sequence with a bad continuation
		"\xed\xa0\x80",     // a UTF-16 surrogate, encoded
		"\xf8\x88\x80\x80", // a 5-byte form
		long,
		long[:len(long)-1] + "j", // shares all but its last byte with long
		strings.Repeat("k", 256-len(principalPrefix)),
		strings.Repeat("k", 257-len(principalPrefix)),
	}
}

// incompressible is n bytes of hex that PostgreSQL cannot compress into
// an index row, as it would a run of one letter.
func incompressible(n int) string {
	rng := rand.New(rand.NewChaCha8([32]byte{}))
	b := make([]byte, n/2)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// openLimiter is a limiter of limit per hour over st, closed at cleanup
// before st.
func openLimiter(t *testing.T, st driver.Counters, limit int) *rate.Limiter {
	t.Helper()
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() {
		pool.Close(context.Background())
		st.Close(context.Background())
	})
	lim, err := rate.New(pool, st, limit, time.Hour, rate.Options{})
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return lim
}

// countHostileAmongGood sends, all at once, one request for each of good
// fresh keys and limit+1 for each hostile key, and checks that every good
// request is allowed and each hostile key allows exactly limit: a key the
// store cannot hold must fail no other key's request, and hostile keys
// must not share a count.
func countHostileAmongGood(t *testing.T, lim *rate.Limiter, limit, good int) {
	t.Helper()
	type result struct {
		key     string
		allowed bool
		err     error
	}
	hostile := hostileKeys()
	results := make(chan result, good+len(hostile)*(limit+1))
	var wg sync.WaitGroup
	start := make(chan struct{})
	send := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := lim.Allow(context.Background(), key)
			results <- result{key, v.Allowed, err}
		}()
	}
	for i := range good {
		send("good:" + strconv.Itoa(i))
	}
	for _, k := range hostile {
		for range limit + 1 {
			send(k)
		}
	}
	close(start)
	wg.Wait()
	close(results)
	goodErrs, goodRefused := 0, 0
	allowed := make(map[string]int)
	for r := range results {
		isGood := strings.HasPrefix(r.key, "good:")
		switch {
		case r.err != nil && isGood:
			goodErrs++
		case r.err != nil:
			t.Errorf("hostile key %.20q (%d bytes): %v", r.key, len(r.key), r.err)
		case isGood && !r.allowed:
			goodRefused++
		case r.allowed:
			allowed[r.key]++
		}
	}
	if goodErrs > 0 || goodRefused > 0 {
		t.Errorf("of %d good requests, %d failed and %d were refused; want all allowed", good, goodErrs, goodRefused)
	}
	for _, k := range hostile {
		if allowed[k] != limit {
			t.Errorf("hostile key %.20q (%d bytes): %d of %d allowed, want %d", k, len(k), allowed[k], limit+1, limit)
		}
	}
}

// On PostgreSQL the hits of many callers are counted in one statement: a
// key its text column refused failed that statement, and every request of
// the batch with it. CommitDelay holds each commit long enough
// for the next batch to gather many keys.
func TestHostileKeysFailOnlyThemselvesPostgres(t *testing.T) {
	st, err := postgres.Open(context.Background(), pgtest.DSN(t), postgres.Options{Options: store.Options{CommitDelay: 20 * time.Millisecond}})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	countHostileAmongGood(t, openLimiter(t, st, 3), 3, 290)
}

// SQLite stores a key's bytes unchanged, NUL and invalid UTF-8 included:
// the counts come back, key for key, after a restart.
func TestHostileKeysFailOnlyThemselvesSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "porch.db")
	st, err := sqlite.Open(path, sqlite.Options{Options: store.Options{CommitDelay: 20 * time.Millisecond}})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	pool := porch.NewPool(porch.PoolOptions{})
	lim, err := rate.New(pool, st, 3, time.Hour, rate.Options{})
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	countHostileAmongGood(t, lim, 3, 290)
	if err := pool.Close(context.Background()); err != nil {
		t.Fatalf("close pool: %v", err)
	}
	if err := st.Close(context.Background()); err != nil {
		t.Fatalf("close store: %v", err)
	}

	st, err = sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatalf("reopen sqlite: %v", err)
	}
	lim = openLimiter(t, st, 3)
	for _, k := range hostileKeys() {
		v, err := lim.Allow(context.Background(), k)
		if err != nil || v.Allowed || v.Remaining != 0 {
			t.Errorf("after restart, key %.20q (%d bytes): allowed %v, remaining %d, %v; want refused", k, len(k), v.Allowed, v.Remaining, err)
		}
	}
}

// FuzzKeyBytes counts two principals of any bytes on both drivers, with a
// limit of 1: the first is allowed, the second is allowed exactly when it
// is another principal, and the first again is refused. A store that
// refuses some bytes fails the call; one that maps two principals to one
// row refuses the second. Each input's principals are made unique to it
// by a numbered prefix, so that inputs share the stores but no counts.
// The PostgreSQL leg runs when PORCH_TEST_POSTGRES (or
// PORCH_REQUIRE_POSTGRES) is set.
func FuzzKeyBytes(f *testing.F) {
	long := incompressible(4 << 10)
	f.Add("\xff", "\xfe")
	f.Add("\x00", "")
	f.Add("a\x00b", "a\x00c")
	f.Add("\xc3\x28", "\xed\xa0\x80")
	f.Add(long, long[:len(long)-1]+"!")
	f.Add(strings.Repeat("k", 256-len(principalPrefix)-2), strings.Repeat("k", 257-len(principalPrefix)-2))
	f.Add("same", "same")

	sq, err := sqlite.Open(filepath.Join(f.TempDir(), "porch.db"), sqlite.Options{})
	if err != nil {
		f.Fatalf("open sqlite: %v", err)
	}
	lims := map[string]*rate.Limiter{"sqlite": fuzzLimiter(f, sq)}
	if os.Getenv(pgtest.EnvDSN) != "" || os.Getenv("PORCH_REQUIRE_POSTGRES") != "" {
		pg, err := postgres.Open(context.Background(), pgtest.DSN(f), postgres.Options{})
		if err != nil {
			f.Fatalf("open postgres: %v", err)
		}
		lims["postgres"] = fuzzLimiter(f, pg)
	}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, a, b string) {
		prefix := strconv.FormatInt(n.Add(1), 10) + ":" // never empty, so Allow takes them
		a, b = prefix+a, prefix+b
		for driver, lim := range lims {
			for i, c := range []struct {
				principal string
				want      bool
			}{{a, true}, {b, a != b}, {a, false}} {
				v, err := lim.Allow(context.Background(), c.principal)
				if err != nil || v.Allowed != c.want {
					t.Errorf("%s, call %d (%d-byte principal %.40q): allowed %v, %v; want allowed %v",
						driver, i, len(c.principal), c.principal, v.Allowed, err, c.want)
				}
			}
		}
	})
}

// fuzzLimiter is a limiter of 1 per hour over st, closed with st when the
// fuzz target ends.
func fuzzLimiter(f *testing.F, st driver.Counters) *rate.Limiter {
	pool := porch.NewPool(porch.PoolOptions{})
	f.Cleanup(func() {
		pool.Close(context.Background())
		st.Close(context.Background())
	})
	lim, err := rate.New(pool, st, 1, time.Hour, rate.Options{})
	if err != nil {
		f.Fatalf("new limiter: %v", err)
	}
	return lim
}
