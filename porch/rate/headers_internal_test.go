package rate

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// A refusal rendered as its window closes (the verdict was decided a moment
// before) still tells the client to wait a second, and RateLimit's t says
// the same as Retry-After. Once, RateLimit said t=0 beside Retry-After: 1,
// the two read from the clock separately.
func TestRefusalHeadersAgreeAsTheWindowCloses(t *testing.T) {
	clock := porchtest.NewFakeClock(t0)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), store.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	pool := porch.NewPool(porch.PoolOptions{Size: 1})
	t.Cleanup(func() { pool.Close(context.Background()) })
	l, err := New(pool, st, 1, time.Minute, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, left := range []time.Duration{0, -time.Second, 1500 * time.Millisecond} {
		v := Verdict{Limit: 1, ResetAt: st.Wall().Add(left)} // refused
		res := l.refusal(httpRequest(), v)
		retry := res.Header.Get("Retry-After")
		want := "1"
		if left > time.Second {
			want = "2"
		}
		if retry != want {
			t.Errorf("%s left: got Retry-After %q, want %q", left, retry, want)
		}
		if got := res.Header.Get("RateLimit"); !strings.HasSuffix(got, ";t="+retry) {
			t.Errorf("%s left: got RateLimit %q beside Retry-After %q, want t=%s", left, got, retry, retry)
		}
	}
}

func httpRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	return r
}
