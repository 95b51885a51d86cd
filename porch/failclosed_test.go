package porch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writeonce/writeonce/porch"
)

func TestFailClosed(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantDetail string
	}{
		{"saturated", porch.ErrSaturated, "saturated"},
		{"request ended", context.Canceled, "request ended"},
		{"deadline", context.DeadlineExceeded, "request ended"},
		{"store failed", errors.New("disk I/O error"), "store failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			res := porch.FailClosed(r, "https://example.test/p", "count this request", tc.err)
			if res.Status != http.StatusServiceUnavailable {
				t.Errorf("status: got %d, want 503", res.Status)
			}
			if got := res.Header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After: got %q, want 1", got)
			}
			if ct := res.Header.Get("Content-Type"); ct != porch.ProblemContentType {
				t.Errorf("Content-Type: got %q, want %q", ct, porch.ProblemContentType)
			}
			if body := string(res.Body); !strings.Contains(body, tc.wantDetail) || !strings.Contains(body, `"https://example.test/p"`) {
				t.Errorf("body %s: want the type and a detail saying %q", body, tc.wantDetail)
			}
		})
	}
}
