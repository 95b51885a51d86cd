package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/internal/pgtest/pgstore"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// newPostgresSet builds a burst and an hourly limiter on one PostgreSQL
// store, and their set.
func newPostgresSet(t *testing.T, burst, hourly int) (*postgres.Store, []*rate.Limiter, *rate.Set) {
	t.Helper()
	st := pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() { pool.Close(context.Background()) }) // before the store's
	var lims []*rate.Limiter
	for _, p := range burstHourly(burst, hourly) {
		l, err := rate.New(pool, st, p.limit, p.window, rate.Options{Name: p.name})
		if err != nil {
			t.Fatalf("new limiter %q: %v", p.name, err)
		}
		lims = append(lims, l)
	}
	return st, lims, rate.All(lims...)
}

// On PostgreSQL, as on SQLite, the 429 is wholly the refusing policy's, and
// the refused requests' hits on the other limiter are taken back out of
// its row.
func TestSetPostgres(t *testing.T) {
	_, lims, set := newPostgresSet(t, 5, 1)
	handler := set.Handler(&counted{})
	for i, want := range []int{200, 429, 429, 429} {
		res, _ := serve(handler, request("192.0.2.1:1"))
		if res.StatusCode != want {
			t.Fatalf("request %d: got status %d, want %d", i+1, res.StatusCode, want)
		}
		if got, want := res.Header.Get("RateLimit-Policy"), policyHeader(5, 1); got != want {
			t.Errorf("request %d: got RateLimit-Policy %q, want %q", i+1, got, want)
		}
		if want != http.StatusTooManyRequests {
			continue
		}
		retry, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if retry <= 60 || retry > 3600 {
			t.Errorf("request %d: got Retry-After %q, want the hourly window's", i+1, res.Header.Get("Retry-After"))
		}
		if got := res.Header.Get("X-RateLimit-Limit"); got != "1" {
			t.Errorf("request %d: got X-RateLimit-Limit %q, want the hourly policy's 1", i+1, got)
		}
		if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"hourly";r=0;t=`+res.Header.Get("Retry-After")) {
			t.Errorf("request %d: got RateLimit %q, want the hourly policy's, agreeing with Retry-After", i+1, got)
		}
	}
	v, err := lims[0].AllowKey(context.Background(), lims[0].CounterKey(request("192.0.2.1:1")))
	if err != nil || !v.Allowed || v.Remaining != 3 {
		t.Errorf("burst limiter after 3 refusals: got %+v, %v; want allowed with 3 left", v, err)
	}
}

// Under parallel requests on PostgreSQL every refused request's hits are
// taken back: each row holds exactly the requests served.
func TestSetPostgresExactUnderParallelism(t *testing.T) {
	const burst, hourly, clients = 40, 60, 200
	st, lims, set := newPostgresSet(t, burst, hourly)
	h := &counted{}
	srv := httptest.NewServer(set.Handler(h))
	t.Cleanup(srv.Close)
	n := getAtOnce(t, srv.Client(), srv.URL, clients)[http.StatusOK]
	if n < 1 || n > burst {
		t.Fatalf("served %d, want 1..%d", n, burst)
	}
	for _, l := range lims {
		key := l.CounterKey(request("127.0.0.1:1"))
		// A hit through the key's actor commits after every take-back
		// the actor queued before it.
		v, err := l.AllowKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		want := n
		if v.Allowed {
			want++
		}
		var stored int64
		if err := st.Pool().QueryRow(context.Background(), `SELECT count FROM porch_rate_counters WHERE key = $1`, key).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != want {
			t.Errorf("%s: got stored count %d, want %d (%d served)", key, stored, want, n)
		}
	}
}
