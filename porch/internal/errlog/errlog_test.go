package errlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/porchtest"
)

// logLine is what a test reads back of one logged line.
type logLine struct {
	Msg        string `json:"msg"`
	Suppressed int    `json:"suppressed"`
}

// jsonLog is a logger that writes JSON lines to a buffer, and a way to read
// them back.
func jsonLog(t *testing.T) (*slog.Logger, func() []logLine) {
	t.Helper()
	var buf bytes.Buffer
	return slog.New(slog.NewJSONHandler(&buf, nil)), func() []logLine {
		t.Helper()
		var out []logLine
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var l logLine
			if err := dec.Decode(&l); err != nil {
				t.Fatalf("read log: %v", err)
			}
			out = append(out, l)
		}
		return out
	}
}

func TestErrorLog(t *testing.T) {
	const every = 10 * time.Second
	type event struct {
		after time.Duration // on the fake clock, since the previous event
		msg   string
	}
	tests := []struct {
		name   string
		events []event
		want   []logLine
	}{
		{"the first of a kind at once", []event{{0, "a"}}, []logLine{{"a", 0}}},
		{
			"repeats within the interval held back",
			[]event{{0, "a"}, {time.Second, "a"}, {8 * time.Second, "a"}},
			[]logLine{{"a", 0}},
		},
		{
			"one line an interval on, with the count",
			[]event{{0, "a"}, {time.Second, "a"}, {time.Second, "a"}, {time.Second, "a"}, {7 * time.Second, "a"}},
			[]logLine{{"a", 0}, {"a", 3}},
		},
		{
			"the interval runs from the last line",
			[]event{{0, "a"}, {every, "a"}, {5 * time.Second, "a"}, {4 * time.Second, "a"}, {time.Second, "a"}},
			[]logLine{{"a", 0}, {"a", 0}, {"a", 2}},
		},
		{
			"kinds apart",
			[]event{{0, "a"}, {0, "b"}, {time.Second, "a"}, {0, "b"}, {0, "c"}},
			[]logLine{{"a", 0}, {"b", 0}, {"c", 0}},
		},
		{
			"after a quiet spell, no count",
			[]event{{0, "a"}, {time.Hour, "a"}},
			[]logLine{{"a", 0}, {"a", 0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := porchtest.NewFakeClock(time.Unix(0, 0))
			logger, lines := jsonLog(t)
			l := errlog.New(clock, every, logger)
			for _, e := range tc.events {
				clock.Advance(e.after)
				l.Error(context.Background(), e.msg, "err", "disk full")
			}
			if got := lines(); !slices.Equal(got, tc.want) {
				t.Errorf("lines: got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNilErrorLogIsTheProcesss(t *testing.T) {
	var l *errlog.Log
	l.Error(context.Background(), "porch test: a nil ErrorLog logs") // must not panic
}

func TestErrorLogAddsTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	l := errlog.New(porchtest.NewFakeClock(time.Unix(0, 0)), 0, slog.New(slog.NewJSONHandler(&buf, nil)))
	ctx := context.WithValue(context.Background(), middleware.RequestIDKey, "host/abc-000001")
	l.Error(ctx, "a")
	var line struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("read the one line logged: %v (%q)", err, buf.String())
	}
	if got, want := line.RequestID, "host/abc-000001"; got != want {
		t.Errorf("got request_id %q, want %q", got, want)
	}
}
