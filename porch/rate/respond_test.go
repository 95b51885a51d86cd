package rate_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// page is a LimitResponse or ErrorResponse body a site might render.
var page = &porch.Response{
	Header: http.Header{"Content-Type": {"text/html"}, "Retry-After": {"9999"}},
	Body:   []byte("<p>slow down</p>"),
}

func TestLimitResponse(t *testing.T) {
	tests := []struct {
		name       string
		respond    func(*http.Request, rate.Verdict) *porch.Response
		wantStatus int
		wantType   string // Content-Type
		wantBody   string // a part of it
	}{
		{"a page; zero Status is 429", func(*http.Request, rate.Verdict) *porch.Response { return page },
			http.StatusTooManyRequests, "text/html", "slow down"},
		{"its own status", func(_ *http.Request, v rate.Verdict) *porch.Response {
			return &porch.Response{Status: http.StatusServiceUnavailable, Body: []byte("limit " + strings.Repeat("!", int(v.Limit)))}
		}, http.StatusServiceUnavailable, "", "limit !"},
		{"nil is the default", func(*http.Request, rate.Verdict) *porch.Response { return nil },
			http.StatusTooManyRequests, porch.ProblemContentType, rate.ProblemLimited},
	}
	for _, tc := range tests {
		for _, w := range wirings {
			t.Run(tc.name+"/"+w.name, func(t *testing.T) {
				rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{LimitResponse: tc.respond}})
				h := &counted{}
				handler := w.wrap(rg.lim, h)
				serve(handler, request("192.0.2.1:1"))
				rg.clock.Advance(20 * time.Second)
				res, body := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != tc.wantStatus || res.Header.Get("Content-Type") != tc.wantType ||
					!strings.Contains(string(body), tc.wantBody) {
					t.Errorf("got %d %q %q, want %d %q with %q", res.StatusCode, res.Header.Get("Content-Type"), body,
						tc.wantStatus, tc.wantType, tc.wantBody)
				}
				// The limiter's headers win over the callback's.
				if got := res.Header.Get("Retry-After"); got != "40" {
					t.Errorf("got Retry-After %q, want %q", got, "40")
				}
				if got := res.Header.Get("X-RateLimit-Remaining"); got != "0" {
					t.Errorf("got X-RateLimit-Remaining %q, want %q", got, "0")
				}
				if n := h.runs.Load(); n != 1 {
					t.Errorf("got handler runs %d, want 1", n)
				}
			})
		}
	}
	if got := page.Header.Get("Retry-After"); got != "9999" {
		t.Errorf("the shared response was changed: Retry-After %q", got)
	}
}

func TestErrorResponse(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			var gotErr error
			rg := newRig(t, 5, time.Minute, rigOptions{
				pool: porch.PoolOptions{Size: 1, Mailbox: 1},
				rate: rate.Options{ErrorResponse: func(_ *http.Request, err error) *porch.Response {
					gotErr = err
					return &porch.Response{Body: []byte("try again soon")}
				}},
			})
			h := &counted{}
			blockActors(t, rg.pool)
			res, body := serve(w.wrap(rg.lim, h), request("192.0.2.1:1"))
			if res.StatusCode != http.StatusServiceUnavailable || string(body) != "try again soon" {
				t.Errorf("got %d %q, want 503 %q", res.StatusCode, body, "try again soon")
			}
			if got := res.Header.Get("Retry-After"); got != "1" {
				t.Errorf("got Retry-After %q, want %q", got, "1")
			}
			if !errors.Is(gotErr, porch.ErrSaturated) {
				t.Errorf("got err %v, want porch.ErrSaturated", gotErr)
			}
			if n := h.runs.Load(); n != 0 {
				t.Errorf("got handler runs %d, want 0: the limiter fails closed", n)
			}
		})
	}
}

func TestProblemBase(t *testing.T) {
	const base = "https://api.example.test/problems/"
	rg := newRig(t, 1, time.Minute, rigOptions{
		pool: porch.PoolOptions{Size: 1, Mailbox: 1},
		rate: rate.Options{ProblemBase: base},
	})
	handler := porch.Chain(rg.lim)(&counted{})
	serve(handler, request("192.0.2.1:1"))
	res, body := serve(handler, request("192.0.2.1:1"))
	wantProblem(t, res, body, http.StatusTooManyRequests, base+"rate-limited")
	blockActors(t, rg.pool)
	res, body = serve(handler, request("192.0.2.2:1"))
	wantProblem(t, res, body, http.StatusServiceUnavailable, base+"rate-unavailable")
}

func TestNewPanicsOnBadProblemBase(t *testing.T) {
	rg := newRig(t, 1, time.Minute, rigOptions{})
	defer func() {
		if msg, _ := recover().(string); !strings.HasPrefix(msg, "rate: ") || !strings.Contains(msg, "ProblemBase") {
			t.Errorf("got panic %q, want one prefixed %q about ProblemBase", msg, "rate: ")
		}
	}()
	rate.New(rg.pool, rg.st, 1, time.Minute, rate.Options{Name: "other", ProblemBase: "https://x.test/%zz"})
}
