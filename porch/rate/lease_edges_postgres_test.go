package rate_test

// Options.Lease at its edges on PostgreSQL: a full mailbox, Resets racing
// trips and give-backs, Close with trips in flight, weights, sliding
// windows, give-backs past the lease.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest/pgstore"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// leasePG opens a store on dsn, a pool of its own (opt), and a limiter.
func leasePG(t *testing.T, dsn string, popt porch.PoolOptions, limit int, window time.Duration, opt rate.Options) (*postgres.Store, *porch.Pool, *rate.Limiter) {
	t.Helper()
	st := pgstore.Open(t, dsn, postgres.Options{})
	pool := porch.NewPool(popt)
	t.Cleanup(func() { pool.Close(context.Background()) }) // before the store's
	lim, err := rate.New(pool, st, limit, window, opt)
	if err != nil {
		t.Fatalf("new limiter: %v", err)
	}
	return st, pool, lim
}

// stall holds an ACCESS EXCLUSIVE lock on the counters table until the
// returned func is called: every store trip (hits, resets, peeks) waits.
func stall(t *testing.T, dsn string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE porch_rate_counters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

func mustAllow(t *testing.T, lim *rate.Limiter, who string) rate.Verdict {
	t.Helper()
	v, err := lim.Allow(context.Background(), who)
	if err != nil || !v.Allowed {
		t.Fatalf("Allow %q: %+v, %v; want allowed", who, v, err)
	}
	return v
}

type outcome struct {
	v   rate.Verdict
	err error
}

func goAllow(lim *rate.Limiter, ctx context.Context, who string) chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		v, err := lim.Allow(ctx, who)
		ch <- outcome{v, err}
	}()
	return ch
}

// when the store callback's SendShard of a lease trip's
// answer finds the actor's mailbox full, the answer is lost and the key's
// lease stays `asking` forever. The hits that were waiting for the trip are
// only redone by the sweeper once the key has been idle for 10*LeaseIdle;
// but every new hit to the key refreshes `used` (take sets e.used) and is
// itself appended to `waiting`. So a key that keeps being hit at least once
// a second is never decided again: every request for it hangs until its
// context ends (Allow with context.Background() hangs forever; an HTTP
// request hangs until the client gives up), and `waiting` grows without
// bound.
func TestLeaseAnswerToAFullMailboxIsNotLost(t *testing.T) {
	dsn := pgtest.DSN(t)
	_, pool, lim := leasePG(t, dsn, porch.PoolOptions{Size: 1, Mailbox: 1}, 1_000_000, time.Hour, rate.Options{Name: "lost", Lease: 8})
	// Warm: hit 1 remembers the key, hit 2 takes a lease of 1, hit 3 spends it.
	for range 3 {
		mustAllow(t, lim, "ann")
	}
	release := stall(t, dsn)
	tripper := goAllow(lim, context.Background(), "ann") // asks for a lease: asking=true, stalled in the store
	time.Sleep(50 * time.Millisecond)
	waiter := goAllow(lim, context.Background(), "ann") // waits for that trip
	time.Sleep(50 * time.Millisecond)
	// Block the (only) actor and fill its one-job mailbox, then let the
	// store answer: the answer's SendShard finds the mailbox full.
	blocked, unblock := make(chan struct{}), make(chan struct{})
	if err := actor.Of(pool).SendShard(0, true, func(int) { close(blocked); <-unblock }); err != nil {
		t.Fatal(err)
	}
	<-blocked
	for actor.Of(pool).SendShard(0, false, func(int) {}) == nil {
	}
	release()
	select {
	case o := <-tripper:
		t.Logf("the trip's own hit: %+v, %v", o.v.Allowed, o.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the trip's own hit was not answered")
	}
	close(unblock)
	// The key stays busy: a client retrying every 50 ms, each giving up
	// after 200 ms.
	deadline := time.Now().Add(3 * time.Second)
	var timedOut, answered int
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := lim.Allow(ctx, "ann")
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			timedOut++
		} else {
			answered++
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case o := <-waiter:
		t.Logf("the waiting hit was answered: %+v, %v (retries: %d answered, %d timed out)", o.v, o.err, answered, timedOut)
	default:
		t.Errorf("the hit that waited for the lost lease trip is still unanswered %s later, and %d of %d later hits to the busy key timed out: a lost answer leaves the key stuck while it stays busy",
			3*time.Second, timedOut, timedOut+answered)
	}
}

// a hit given back (CountStatus) after a Reset of its key
// on this instance goes into the lease the Reset "dropped": drop zeroes the
// tokens but keeps the lease's start and until, and giveBack checks only
// those. The given-back hit was counted before the reset, which the store
// wiped, so the token it mints is counted nowhere: the next request is
// answered from it without being counted, past the limit (and with
// RateLimit-Limit 0, from the zeroed verdict). The login flow of the Reset
// doc — count failures only, Reset on success — does exactly this.
func TestLeaseGiveBackAfterResetStaysCounted(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 10
	var lim *rate.Limiter
	_, _, lim = leasePG(t, dsn, porch.PoolOptions{}, limit, time.Hour,
		rate.Options{Name: "reset-giveback", Lease: 8, KeyFunc: byUser, CountStatus: rate.Failures})
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("ok") {
			// Right password: clear the user's failures.
			if err := lim.Reset(r.Context(), r.Header.Get("X-User")); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Write([]byte("welcome"))
			return
		}
		http.Error(w, "wrong password", http.StatusUnauthorized)
	}))
	// Two failures: the second takes a lease (the key is busy).
	for range 2 {
		if res, _ := serve(h, attempt("ann", false)); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %d", res.StatusCode)
		}
	}
	if res, _ := serve(h, attempt("ann", true)); res.StatusCode != http.StatusOK {
		t.Fatalf("login: got %d", res.StatusCode)
	}
	// After the reset: failures allowed until the first 429.
	allowed := 0
	var limits []string
	for range 2 * limit {
		res, _ := serve(h, attempt("ann", false))
		if res.StatusCode == http.StatusTooManyRequests {
			break
		}
		allowed++
		limits = append(limits, res.Header.Get("X-RateLimit-Limit")+"/"+res.Header.Get("X-RateLimit-Reset"))
	}
	if allowed > limit {
		t.Errorf("after Reset %d failed attempts were allowed, over the limit of %d (X-RateLimit-Limit/Reset headers: %v)", allowed, limit, limits)
	}
}

// a lease trip in flight when its key is Reset, landing
// after the sweeper forgot the key and a new hit re-created its entry,
// is applied to the new entry: every entry starts at gen 0, so the stale
// answer's gen matches. Its extra hits were counted before the reset (which
// wiped them), yet become the new lease's tokens: answered uncounted, past
// the limit. Needs the store to take > ~LeaseIdle for the trip (a paused or
// slow database).
func TestLeaseTripRacingResetIsGivenBack(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 10
	_, _, lim := leasePG(t, dsn, porch.PoolOptions{}, limit, time.Hour, rate.Options{Name: "reset-race", Lease: 8})
	for range 3 { // remember, lease 1, spend it
		mustAllow(t, lim, "ann")
	}
	release := stall(t, dsn)
	a := goAllow(lim, context.Background(), "ann") // asks for a lease of 2, stalled
	time.Sleep(30 * time.Millisecond)
	reset := make(chan error, 1)
	go func() { reset <- lim.Reset(context.Background(), "ann") }() // drops the lease (gen 1); stalled
	time.Sleep(3 * rate.LeaseIdle)                                  // the sweeper forgets the idle key
	b := goAllow(lim, context.Background(), "ann")                  // a new entry, gen 0; stalled
	time.Sleep(30 * time.Millisecond)
	release()
	for _, ch := range []chan outcome{a, b} {
		if o := <-ch; o.err != nil {
			t.Fatal(o.err)
		}
	}
	if err := <-reset; err != nil {
		t.Fatal(err)
	}
	// b counted 1 after the reset: limit-1 more may be allowed.
	allowed := 1
	for range 2 * limit {
		v, err := lim.Allow(context.Background(), "ann")
		if err != nil {
			t.Fatal(err)
		}
		if !v.Allowed {
			break
		}
		allowed++
	}
	if allowed > limit {
		t.Errorf("after Reset %d hits were allowed, over the limit of %d: the pre-reset trip's lease was handed to the new entry", allowed, limit)
	}
}

// Close does not give back a lease trip still in flight
// (its answer finds no entry and is dropped "on the safe side"), so Close
// returns nil yet the store over-counts by that trip's extra hits, against
// "Close gives unanswered hits back, leaving exact counts". Here the caller
// of the trip gave up (as a drained server's client may); the same happens
// for any hit racing Close.
func TestLeaseCloseWaitsForTripsInFlight(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 1000
	_, _, lim := leasePG(t, dsn, porch.PoolOptions{}, limit, time.Hour, rate.Options{Name: "close-race", Lease: 8})
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: "close-race"})
	for range 3 {
		mustAllow(t, lim, "ann")
	}
	release := stall(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	a := goAllow(lim, ctx, "ann") // lease trip of 1+2, stalled
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-a
	closed := make(chan error, 1)
	go func() { closed <- lim.Close(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// 3 answered, plus the abandoned hit (counted, the safe side): 4.
	if got := stored(t, peek, limit, "ann"); got != 4 {
		t.Errorf("after Close the store holds %d, want 4 (3 answered + the abandoned hit): the in-flight trip's lease was never given back", got)
	}
}

// with weights, a lease makes its own instance refuse a
// request the exact count allows. The lease's tokens are counted in the
// store but unanswered; a hit heavier than the tokens goes to the store for
// its whole weight, where the tokens are already spent, and is refused
// (with RetryAt at the window's end, an hour away, and remembered by the
// refusal cache). The documented price is only that *another* instance may
// refuse; the previous verdict on this instance said the room was there.
func TestLeaseNeverRefusesItsOwnWeightedHit(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit = 20
	for _, lease := range []int{0, 8} {
		_, _, lim := leasePG(t, dsn, porch.PoolOptions{}, limit, time.Hour, rate.Options{Name: "weighted-" + string(rune('a'+lease)), Lease: lease})
		var v rate.Verdict
		for range 5 {
			v = mustAllow(t, lim, "ann")
		}
		n := int(v.Remaining) // what the last verdict said is left
		w, err := lim.AllowN(context.Background(), "ann", n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("lease %d: after 5 hits Remaining=%d; AllowN(%d): allowed=%v remaining=%d retry in %s",
			lease, n, n, w.Allowed, w.Remaining, time.Until(w.RetryAt).Round(time.Second))
		if !w.Allowed {
			t.Errorf("lease %d: AllowN(%d) refused right after a verdict of Remaining %d on the same instance, with no other traffic (exact count: %d of %d used)", lease, n, n, 5, limit)
			// A client retrying the weighted request every 50 ms keeps the
			// lease from ever going idle (take refreshes e.used on a
			// miss), so it is refused until the window ends.
			refused := 0
			for range 30 {
				time.Sleep(50 * time.Millisecond)
				if w, err := lim.AllowN(context.Background(), "ann", n); err == nil && !w.Allowed {
					refused++
				}
			}
			t.Errorf("lease %d: then %d of 30 retries of AllowN(%d) over 1.5 s were refused too: the lease never idles while the client retries", lease, refused, n)
		}
		closeLimiter(t, lim)
	}
}

// on a SlidingWindow, the tokens a busy key's lease
// still holds when its bucket ends are dropped, not given back (the store's
// TakeBack only applies to the current bucket, and neither the sweeper,
// answered's epoch switch, nor Close gives back past `until`). Those hits
// were counted and never answered, and the previous bucket's count weighs
// on the next window's estimate: without any crash, the key is over-counted
// by up to Lease (weighted) in the following window, and Close does not
// leave exact counts. Two limiters, one leased and one not, take the same
// hits side by side across a bucket boundary; the leased key's previous
// bucket holds more than was answered in it.
func TestLeaseSlidingGivenBackBeforeItsWindowEnds(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, window = 1_000_000, time.Second
	_, _, leased := leasePG(t, dsn, porch.PoolOptions{}, limit, window, rate.Options{Name: "slide-lease", Lease: 64, Algorithm: rate.SlidingWindow})
	_, _, exact := leasePG(t, dsn, porch.PoolOptions{}, limit, window, rate.Options{Name: "slide-exact", Algorithm: rate.SlidingWindow})
	start := time.Now()
	answered := int64(0)
	for time.Since(start) < window+300*time.Millisecond {
		mustAllow(t, leased, "ann")
		mustAllow(t, exact, "ann")
		answered++
	}
	time.Sleep(3 * rate.LeaseIdle) // the current bucket's lease is given back
	closeLimiter(t, leased)
	closeLimiter(t, exact)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT convert_from(key, 'UTF8'), prev, count, window_start FROM porch_rate_counters ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	total := map[string]int64{}
	for rows.Next() {
		var k string
		var p, c, ws int64
		if err := rows.Scan(&k, &p, &c, &ws); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: prev %d count %d window_start %d", k, p, c, ws)
		total[k] = p + c
	}
	// Both keys' hits all fall in their two buckets: prev+count is what
	// each counted in all.
	l, e := total["rate:slide-lease:p:ann"], total["rate:slide-exact:p:ann"]
	if e != answered || l != answered {
		t.Errorf("answered %d hits on each limiter; after Close the exact key holds %d, the leased key %d: %d counted, never answered, weighing on the next window", answered, e, l, l-answered)
	}
}

// giveBack adds to a lease's tokens without a cap, so a
// burst of given-back hits (CountStatus) makes one instance hold far more
// than Lease counted-but-unanswered hits: a kill -9 then over-counts by
// more than "at most Lease per key per instance", and another instance is
// refused for more than a lease's worth meanwhile.
func TestLeaseGiveBacksNeverHoldMoreThanLease(t *testing.T) {
	dsn := pgtest.DSN(t)
	const limit, lease = 1000, 4
	_, _, lim := leasePG(t, dsn, porch.PoolOptions{}, limit, time.Hour,
		rate.Options{Name: "giveback-cap", Lease: lease, KeyFunc: byUser, CountStatus: rate.Failures})
	_, peek := openShared(t, dsn, limit, time.Hour, rate.Options{Name: "giveback-cap"})
	h := lim.Handler(&login{})
	for range 3 { // warm: a lease exists for this epoch
		serve(h, attempt("ann", false))
	}
	var wg sync.WaitGroup
	for range 40 { // successes, all given back
		wg.Go(func() { serve(h, attempt("ann", true)) })
	}
	wg.Wait()
	// Only the 3 failures stand; the instance holds the rest unanswered
	// (this is what a kill -9 now would leave in the store), once the
	// give-backs to the store have landed: read before the key has idled
	// for LeaseIdle, when the sweeper would give back everything.
	idle := time.Now()
	for {
		held := stored(t, peek, limit, "ann") - 3
		if held <= lease {
			break
		}
		if time.Since(idle) > rate.LeaseIdle*9/10 {
			t.Fatalf("the instance holds %d counted, unanswered hits for one key, more than Lease %d", held, lease)
		}
	}
	closeLimiter(t, lim)
}
