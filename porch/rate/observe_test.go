package rate_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
)

// Every decision is told to the observer under the limiter's name: 2
// allowed and 1 limited at a limit of 2, then 1 unavailable on a saturated
// pool, which the pool's observer counts as a rejection.
func TestObserverCountsEveryVerdict(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			obs := &porchtest.Observer{}
			rg := newRig(t, 2, time.Minute, rigOptions{
				pool: porch.PoolOptions{Size: 1, Mailbox: 1, Observer: obs},
				rate: rate.Options{Name: "api", Observer: obs},
			})
			handler := w.wrap(rg.lim, &counted{})
			for range 3 {
				serve(handler, request("192.0.2.1:1"))
			}
			release := blockActors(t, rg.pool)
			res, _ := serve(handler, request("192.0.2.1:1"))
			release()
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("on a saturated pool: got status %d, want 503", res.StatusCode)
			}
			for _, c := range []struct {
				o    rate.Outcome
				want int
			}{{rate.Allowed, 2}, {rate.Limited, 1}, {rate.Unavailable, 1}} {
				if got := obs.Rate("api", c.o); got != c.want {
					t.Errorf("%s: got %d, want %d", c.o, got, c.want)
				}
			}
			if got := obs.Rejected(); got != 1 {
				t.Errorf("got %d pool rejections, want 1", got)
			}
		})
	}
}

// Allow, which counts outside a handler, is a decision too.
func TestObserverCountsAllow(t *testing.T) {
	obs := &porchtest.Observer{}
	rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{Observer: obs}})
	rg.allow(t, "alice")
	rg.allow(t, "alice")
	if got := obs.Rate("default", rate.Allowed); got != 1 {
		t.Errorf("allowed: got %d, want 1", got)
	}
	if got := obs.Rate("default", rate.Limited); got != 1 {
		t.Errorf("limited: got %d, want 1", got)
	}
}

// A store failure is logged through Options.Logger.
func TestLoggerGetsStoreFailures(t *testing.T) {
	var buf bytes.Buffer // written on the request's goroutine
	rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))}})
	if _, err := rg.st.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	res, _ := serve(porch.Chain(rg.lim)(&counted{}), request("192.0.2.1:1"))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got status %d, want 503", res.StatusCode)
	}
	if got := buf.String(); !strings.Contains(got, "porch: could not count this request") || !strings.Contains(got, "boom") {
		t.Errorf("got log %q, want the store failure", got)
	}
}

func TestOutcomeLabels(t *testing.T) {
	tests := []struct {
		o    rate.Outcome
		want string
	}{
		{rate.Allowed, "allowed"},
		{rate.Limited, "limited"},
		{rate.Unavailable, "unavailable"},
	}
	for _, tt := range tests {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("rate.Outcome(%d): got label %q, want %q", tt.o, got, tt.want)
		}
	}
}
