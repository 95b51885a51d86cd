package rate_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// A set whose only counting limiters are in DryRun (every enforcing one
// skipped the request with ErrSkip, or the set has none) never refuses:
// a dry-run limiter over its limit serves the request and says so in
// X-RateLimit-Dry-Run, as it does alone. The set once answered 429 with
// the dry-run policy's Retry-After.
func TestSetOfDryRunsNeverRefuses(t *testing.T) {
	skipAll := func(*http.Request) (string, error) { return "", porch.ErrSkip }
	for _, w := range setWirings {
		t.Run(w.name, func(t *testing.T) {
			_, _, set := newSet(t,
				policy{name: "new", limit: 1, window: time.Minute, opt: rate.Options{DryRun: true}},
				policy{name: "enforced", limit: 5, window: time.Minute, opt: rate.Options{KeyFunc: skipAll}})
			h := &counted{}
			handler := w.wrap(set, h)
			for i, want := range []string{"allowed", "limited", "limited"} {
				res, _ := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != http.StatusOK {
					t.Fatalf("request %d: got status %d (Retry-After %q), want 200: a dry run never refuses", i+1, res.StatusCode, res.Header.Get("Retry-After"))
				}
				if got := res.Header.Get("X-RateLimit-Dry-Run"); got != want {
					t.Errorf("request %d: got X-RateLimit-Dry-Run %q, want %q", i+1, got, want)
				}
				if got := res.Header.Get("Retry-After"); got != "" {
					t.Errorf("request %d: got Retry-After %q on a served request, want none", i+1, got)
				}
			}
			if got := h.runs.Load(); got != 3 {
				t.Errorf("handler ran %d times, want 3", got)
			}
		})
	}
}
