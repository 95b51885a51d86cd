package rate

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A refusal rendered as its window closes (the verdict was decided a moment
// before) still tells the client to wait a second, and RateLimit's t says
// the same as Retry-After. Once, RateLimit said t=0 beside Retry-After: 1,
// the two read from the clock separately.
func TestRefusalHeadersAgreeAsTheWindowCloses(t *testing.T) {
	rg := newInternalRig(t, 1, 1, time.Minute)
	l := rg.l
	for _, left := range []time.Duration{0, -time.Second, 1500 * time.Millisecond} {
		v := Verdict{Limit: 1, ResetAt: rg.st.Wall().Add(left), RetryAt: rg.st.Wall().Add(left)} // refused
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
