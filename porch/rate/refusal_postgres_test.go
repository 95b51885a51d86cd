package rate_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/rate"
)

// refuse counts principal on lim until refused, and returns that refusal.
func refuse(t testing.TB, lim *rate.Limiter, principal string) rate.Verdict {
	t.Helper()
	for range 100 {
		v, err := lim.Allow(context.Background(), principal)
		if err != nil {
			t.Fatalf("Allow %q: %v", principal, err)
		}
		if !v.Allowed {
			return v
		}
	}
	t.Fatalf("Allow %q: never refused", principal)
	return rate.Verdict{}
}

// Once the store has refused a key, later refusals of it are answered from
// memory: no write reaches the store, and each is the store's verdict,
// headers and all. With the cache off every one is a round trip.
func TestRefusalCacheSavesRoundTrips(t *testing.T) {
	dsn := pgtest.DSN(t)
	const flood = 200
	for _, c := range []struct {
		name  string
		for_  time.Duration
		extra int64 // writes the flood may cost
	}{{"cached", 0, 0}, {"off", -1, flood}} {
		t.Run(c.name, func(t *testing.T) {
			st, lim := openShared(t, dsn, 1, time.Hour, rate.Options{Name: "flood-" + c.name, KeyFunc: byUser, RefusalCacheFor: c.for_})
			first := refuse(t, lim, "mallory")
			h := lim.Handler(&counted{})
			before := st.Stats().Writes
			for i := range flood {
				// Retry-After was read off the clock after sent, however
				// long the answer took: measured from the check instead, a
				// second's slack was not enough on a loaded machine.
				sent := time.Now()
				res, _ := serve(h, attempt("mallory", false))
				if res.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("request %d: got %d, want 429", i+1, res.StatusCode)
				}
				ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
				if err != nil || ra < 1 || time.Duration(ra-1)*time.Second > first.RetryAt.Sub(sent) {
					t.Fatalf("request %d: got Retry-After %q, want the store's, counting down to %s", i+1, res.Header.Get("Retry-After"), first.RetryAt)
				}
			}
			if got := st.Stats().Writes - before; got != c.extra {
				t.Fatalf("%d refused requests cost %d writes, want %d", flood, got, c.extra)
			}
		})
	}
}

// A Reset on another instance is honoured here within RefusalCacheFor; one
// on this instance at once.
func TestRefusalCacheResetBound(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const life = 300 * time.Millisecond
	opt := rate.Options{Name: "reset", RefusalCacheFor: life}
	_, a := openShared(t, dsn, 1, time.Hour, opt)
	_, b := openShared(t, dsn, 1, time.Hour, opt)

	refuse(t, a, "ann")
	if err := a.Reset(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Allow(ctx, "ann"); err != nil || !v.Allowed {
		t.Fatalf("right after a Reset on this instance: got %+v, %v; want allowed", v, err)
	}

	refuse(t, a, "bob")
	if err := b.Reset(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	for {
		v, err := a.Allow(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			break
		}
		if waited := time.Since(reset); waited > life+200*time.Millisecond {
			t.Fatalf("a Reset on another instance not honoured after %s, want within %s", waited, life)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("honoured %s after the other instance's Reset returned", time.Since(reset).Round(time.Millisecond))
}

// A hit given back on this instance (Options.CountStatus) clears the key's
// cached refusal at once: the request after it is counted by the store.
func TestRefusalCacheClearedByGiveBack(t *testing.T) {
	_, lim := openShared(t, pgtest.DSN(t), 1, time.Hour, rate.Options{Name: "giveback", KeyFunc: byUser, CountStatus: rate.Failures, RefusalCacheFor: time.Hour})
	entered, release := make(chan struct{}), make(chan struct{})
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			close(entered)
			<-release
		}
	}))
	var wg sync.WaitGroup
	wg.Go(func() {
		r := attempt("ann", true)
		r.URL.RawQuery = "slow"
		if res, _ := serve(h, r); res.StatusCode != http.StatusOK {
			t.Errorf("slow login: got %d, want 200", res.StatusCode)
		}
	})
	<-entered
	for range 3 { // the first is the store's refusal, the others the cache's
		if res, _ := serve(h, attempt("ann", true)); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("while the slow login holds the limit: got %d, want 429", res.StatusCode)
		}
	}
	close(release)
	wg.Wait() // its 200 is given back
	if res, _ := serve(h, attempt("ann", true)); res.StatusCode != http.StatusOK {
		t.Fatalf("after the slow login's hit was given back: got %d, want 200", res.StatusCode)
	}
}

// The cache never refuses past the moment the store would allow: with a
// GCRA of one request per 100ms, requests are refused (from memory) until
// the refusal's RetryAt, and the first one after it is served, although
// RefusalCacheFor is an hour.
func TestRefusalCacheNeverPastRetryAt(t *testing.T) {
	st, lim := openShared(t, pgtest.DSN(t), 10, time.Second, rate.Options{Name: "gcra", Algorithm: rate.GCRA, Burst: 1, RefusalCacheFor: time.Hour})
	ctx := context.Background()
	for round := range 5 {
		sent := time.Now()
		v := refuse(t, lim, "ann")
		// RetryAt is read on the database's clock at its transaction's
		// start and mapped onto the wall clock when the verdict came back:
		// late by up to the round trip (the safe side for Retry-After), so
		// the store may allow that much before it. Only that margin is left
		// out here; under it the cache must refuse.
		margin := 20*time.Millisecond + time.Since(sent)
		before := st.Stats().Writes
		refused := 0
		for time.Until(v.RetryAt) > margin {
			w, err := lim.Allow(ctx, "ann")
			// Judged by when the answer came back: a loaded machine can
			// hold a call that began before the margin until after it,
			// and then an allowance may be right.
			if err != nil || w.Allowed && time.Until(v.RetryAt) > margin {
				t.Fatalf("round %d, %s before RetryAt: got %+v, %v; want refused", round, time.Until(v.RetryAt), w, err)
			}
			if w.Allowed {
				t.Logf("round %d: a call that began before the margin was answered after it, allowed", round)
				refused = -1
				break
			}
			refused++
			time.Sleep(time.Millisecond)
		}
		if refused < 0 {
			continue // the allowance the round ends with is spent
		}
		if got := st.Stats().Writes - before; got != 0 {
			t.Errorf("round %d: %d refusals before RetryAt cost %d writes, want 0", round, refused, got)
		}
		time.Sleep(time.Until(v.RetryAt))
		if w, err := lim.Allow(ctx, "ann"); err != nil || !w.Allowed {
			t.Fatalf("round %d, at RetryAt: got %+v, %v; want allowed", round, w, err)
		}
	}
}

// BenchmarkRefusedFloodPostgres floods one refused key with requests, one
// after another, and reports the store's writes and commits per refused
// request, with the local refusal cache off and on:
//
//	go test -run '^$' -bench RefusedFloodPostgres -benchtime 10000x ./porch/rate/
func BenchmarkRefusedFloodPostgres(b *testing.B) {
	dsn := pgtest.DSN(b)
	for _, c := range []struct {
		name string
		for_ time.Duration
	}{{"cache=off", -1}, {"cache=on", 0}} {
		b.Run(c.name, func(b *testing.B) {
			st, lim := openShared(b, dsn, 1, time.Hour, rate.Options{Name: "bench-" + c.name[6:], KeyFunc: byUser, RefusalCacheFor: c.for_})
			refuse(b, lim, "mallory")
			h := lim.Handler(&counted{})
			before := st.Stats()
			for b.Loop() {
				if res, _ := serve(h, attempt("mallory", false)); res.StatusCode != http.StatusTooManyRequests {
					b.Fatalf("got %d, want 429", res.StatusCode)
				}
			}
			after := st.Stats()
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(b.N), "writes/op")
			b.ReportMetric(float64(after.Commits-before.Commits)/float64(b.N), "commits/op")
		})
	}
}
