package rate_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
)

// costHeader weighs a request by its X-Cost header.
func costHeader(r *http.Request) int {
	n, err := strconv.Atoi(r.Header.Get("X-Cost"))
	if err != nil {
		return 1
	}
	return n
}

func TestWeight(t *testing.T) {
	steps := []struct {
		cost          int
		wantStatus    int
		wantRemaining string
	}{
		{4, http.StatusOK, "6"},
		{4, http.StatusOK, "2"},
		{3, http.StatusTooManyRequests, "2"}, // 8+3 > 10: refused, and not counted
		{2, http.StatusOK, "0"},
		{1, http.StatusTooManyRequests, "0"},
	}
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 10, time.Minute, rigOptions{rate: rate.Options{Weight: costHeader}})
			handler := w.wrap(rg.lim, &counted{})
			for i, s := range steps {
				r := request("192.0.2.1:1")
				r.Header.Set("X-Cost", strconv.Itoa(s.cost))
				res, _ := serve(handler, r)
				if res.StatusCode != s.wantStatus {
					t.Fatalf("request %d of cost %d: got status %d, want %d", i+1, s.cost, res.StatusCode, s.wantStatus)
				}
				if got := res.Header.Get("X-RateLimit-Remaining"); got != s.wantRemaining {
					t.Errorf("request %d of cost %d: got X-RateLimit-Remaining %q, want %q", i+1, s.cost, got, s.wantRemaining)
				}
			}
		})
	}
}

// A weighted count is durable like any other: after a clean restart the
// window resumes at the sum of the weights, not the number of requests.
func TestWeightSurvivesRestart(t *testing.T) {
	alice := func(*http.Request) (string, error) { return "alice", nil }
	first := newRig(t, 10, time.Hour, rigOptions{rate: rate.Options{KeyFunc: alice}})
	for _, n := range []int{3, 5} {
		if v, err := first.lim.AllowN(context.Background(), "alice", n); err != nil || !v.Allowed {
			t.Fatalf("AllowN(%d): got %+v, %v; want allowed", n, v, err)
		}
	}
	// Durable before the verdict: a crash here loses none of the 8.
	if n, _, _ := storedCount(t, first.st.DB(), first.lim.CounterKey(request("192.0.2.1:1"))); n < 8 {
		t.Errorf("got stored count %d, want at least 8", n)
	}
	if err := first.lim.Close(context.Background()); err != nil {
		t.Fatalf("close limiter: %v", err)
	}
	first.stop(t)
	second := newRig(t, 10, time.Hour, rigOptions{path: first.path, clock: first.clock})
	v, err := second.lim.AllowN(context.Background(), "alice", 3)
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed || v.Remaining != 2 {
		t.Errorf("after restart, AllowN(3) at 8 of 10: got allowed %v remaining %d, want refused with 2 left", v.Allowed, v.Remaining)
	}
	if v := second.allow(t, "alice"); !v.Allowed || v.Remaining != 1 {
		t.Errorf("after restart, Allow at 8 of 10: got allowed %v remaining %d, want allowed with 1 left", v.Allowed, v.Remaining)
	}
}

func TestAllowNRefusesBadWeights(t *testing.T) {
	rg := newRig(t, 10, time.Minute, rigOptions{})
	tests := []struct {
		name string
		n    int
		want error
	}{
		{"zero", 0, rate.ErrWeight},
		{"negative", -1, rate.ErrWeight},
		{"over the limit", 11, rate.ErrOverLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := rg.lim.AllowN(context.Background(), "alice", tt.n); !errors.Is(err, tt.want) {
				t.Errorf("AllowN(%d): got %v, want %v", tt.n, err, tt.want)
			}
		})
	}
	// Nothing was counted: the whole limit is still there.
	if v, err := rg.lim.AllowN(context.Background(), "alice", 10); err != nil || !v.Allowed {
		t.Errorf("AllowN(10) after the refused ones: got %+v, %v; want allowed", v, err)
	}
}

func TestWeightMiddlewareAnswers(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 10, time.Minute, rigOptions{rate: rate.Options{Weight: costHeader}})
			h := &counted{}
			handler := w.wrap(rg.lim, h)
			for _, tt := range []struct {
				cost       int
				wantStatus int
				wantType   string
			}{
				{11, http.StatusRequestEntityTooLarge, rate.ProblemOverLimit},
				{0, http.StatusInternalServerError, rate.ProblemKeyFailed},
			} {
				r := request("192.0.2.1:1")
				r.Header.Set("X-Cost", strconv.Itoa(tt.cost))
				res, body := serve(handler, r)
				wantPlainProblem(t, res, body, tt.wantStatus, tt.wantType)
			}
			if n := h.runs.Load(); n != 0 {
				t.Errorf("got handler run %d times, want 0", n)
			}
		})
	}
}
