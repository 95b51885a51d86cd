package rate_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

func TestDryRun(t *testing.T) {
	var logs bytes.Buffer // Options.Logger, written on the requests' goroutine
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	steps := []struct {
		wantDryRun, wantRemaining string
	}{
		{"allowed", "1"},
		{"allowed", "0"},
		{"limited", "0"},
		{"limited", "0"},
	}
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			logs.Reset()
			rg := newRig(t, 2, time.Minute, rigOptions{rate: rate.Options{DryRun: true, Logger: logger}})
			h := &counted{}
			handler := w.wrap(rg.lim, h)
			for i, s := range steps {
				res, _ := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != http.StatusOK {
					t.Fatalf("request %d: got status %d, want 200: a dry run never refuses", i+1, res.StatusCode)
				}
				if got := res.Header.Get("X-RateLimit-Dry-Run"); got != s.wantDryRun {
					t.Errorf("request %d: got X-RateLimit-Dry-Run %q, want %q", i+1, got, s.wantDryRun)
				}
				if got := res.Header.Get("X-RateLimit-Remaining"); got != s.wantRemaining {
					t.Errorf("request %d: got X-RateLimit-Remaining %q, want %q", i+1, got, s.wantRemaining)
				}
				if got := res.Header.Get("Retry-After"); got != "" {
					t.Errorf("request %d: got Retry-After %q on a served request, want none", i+1, got)
				}
			}
			if n := h.runs.Load(); n != int64(len(steps)) {
				t.Errorf("got handler run %d times, want %d", n, len(steps))
			}
			// The first would-be refusal is logged at once, the next held
			// back until the interval has passed.
			if n := strings.Count(logs.String(), "would have refused"); n != 1 {
				t.Errorf("got %d would-have-refused lines, want 1:\n%s", n, logs.String())
			}
			rg.clock.Advance(10 * time.Second)
			serve(handler, request("192.0.2.1:1"))
			if n := strings.Count(logs.String(), "suppressed=1"); n != 1 {
				t.Errorf("after the interval: got %d lines with suppressed=1, want 1:\n%s", n, logs.String())
			}
			// Counted as enforcing counts: a refusal adds nothing.
			key := rg.lim.CounterKey(request("192.0.2.1:1"))
			if v := rg.allowKey(t, key); v.Allowed || v.Remaining != 0 {
				t.Errorf("after the dry run: got %+v, want refused with 0 left", v)
			}
		})
	}
}

// A dry run never refuses, not even when it cannot count.
func TestDryRunServesWhatItCannotCount(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{
				pool: porch.PoolOptions{Size: 1, Mailbox: 1},
				rate: rate.Options{DryRun: true},
			})
			h := &counted{}
			handler := w.wrap(rg.lim, h)
			blockActors(t, rg.pool)
			res, _ := serve(handler, request("192.0.2.1:1"))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("saturated dry run: got status %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("X-RateLimit-Dry-Run"); got != "" {
				t.Errorf("uncounted request: got X-RateLimit-Dry-Run %q, want none", got)
			}
			if n := h.runs.Load(); n != 1 {
				t.Errorf("got handler run %d times, want 1", n)
			}
		})
	}
}
