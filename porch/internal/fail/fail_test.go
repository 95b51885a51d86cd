package fail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/fail"
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
			got := fail.Detail(nil, r, "count this request", tc.err)
			if !strings.Contains(got, tc.wantDetail) || !strings.HasSuffix(got, "count this request") {
				t.Errorf("detail %q: want one saying %q and naming the work", got, tc.wantDetail)
			}
		})
	}
}

// A store that fails fails every request: a burst of the same failure is
// one line, not one per request (a full disk logged ~10,000 a second).
// burstRuns counts TestFailClosedLogsABurstOnce's runs.
var burstRuns atomic.Int64

func TestFailClosedLogsABurstOnce(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	lines := func() (out []struct{ Msg string }) {
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var l struct{ Msg string }
			if err := dec.Decode(&l); err != nil {
				t.Fatalf("read log: %v", err)
			}
			out = append(out, l)
		}
		return out
	}
	prev := slog.Default()
	slog.SetDefault(logger)
	t.Cleanup(func() { slog.SetDefault(prev) })

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	// The log's memory of what it has said is the process's: a kind of
	// failure of its own per run lets -count run the test again.
	what := fmt.Sprintf("test a burst of failures (run %d)", burstRuns.Add(1))
	for range 1000 {
		fail.Detail(nil, r, what, errors.New("database or disk is full"))
	}
	if got := lines(); len(got) != 1 || got[0].Msg != "porch: could not "+what {
		t.Errorf("lines logged for 1000 failures: got %d %+v, want the first alone", len(got), got)
	}
}
