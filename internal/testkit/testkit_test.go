package testkit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/testkit"
)

// recorder is a testing.TB that records what a helper reports instead of
// failing the test running it, so that the helpers' own failures are
// tested. Fatalf ends the goroutine, as testing's does.
type recorder struct {
	testing.TB // the real test, for Cleanup; nil methods are not called
	mu         sync.Mutex
	reports    []string
	fatal      bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own (Fatalf ends it)
// and returns what f reported.
func run(t *testing.T, f func(tb testing.TB)) (reports []string, fatal bool) {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.reports, r.fatal
}

func TestWantProblem(t *testing.T) {
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	body := []byte(`{"type":"https://example.com/held","title":"Held","status":409}`)
	tests := []struct {
		name      string
		status    int
		header    http.Header
		body      []byte
		wantTyp   string
		wantCount int
		wantFatal bool
	}{
		{"matches", 409, problem, body, "https://example.com/held", 0, false},
		{"other status", 200, problem, body, "https://example.com/held", 1, false},
		{"not problem+json", 409, http.Header{"Content-Type": {"application/json"}}, body, "https://example.com/held", 1, false},
		{"other type", 409, problem, body, "https://example.com/other", 1, false},
		{"not json", 409, problem, []byte("held"), "https://example.com/held", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reports, fatal := run(t, func(tb testing.TB) {
				testkit.WantProblem(tb, tt.status, tt.header, tt.body, 409, tt.wantTyp)
			})
			if len(reports) != tt.wantCount || fatal != tt.wantFatal {
				t.Errorf("got %d reports %q, fatal %v; want %d, fatal %v", len(reports), reports, fatal, tt.wantCount, tt.wantFatal)
			}
		})
	}
}

// parkHere blocks on release; its name is what the stack tests look for.
func parkHere(release <-chan struct{}) { <-release }

func TestWaitStacks(t *testing.T) {
	const frame = "testkit_test.parkHere("
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	for range 2 {
		wg.Go(func() { parkHere(release) })
	}
	if reports, _ := run(t, func(tb testing.TB) { testkit.WaitStacks(tb, frame, 2, 10*time.Second) }); len(reports) != 0 {
		t.Errorf("WaitStacks for the 2 parked goroutines: %q", reports)
	}
	if got := testkit.CountStacks(frame); got != 2 {
		t.Errorf("CountStacks: got %d, want 2", got)
	}
	if reports, fatal := run(t, func(tb testing.TB) { testkit.WaitStacks(tb, frame, 1, 10*time.Second) }); !fatal {
		t.Errorf("WaitStacks for 1 of 2 parked goroutines: got %q, want a failure at once", reports)
	}
	if reports, fatal := run(t, func(tb testing.TB) { testkit.WaitStacks(tb, frame, 3, 10*time.Millisecond) }); !fatal {
		t.Errorf("WaitStacks for 3 of 2 parked goroutines: got %q, want a failure at its bound", reports)
	}
}

func TestWaitStack(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	defer func() { close(release); <-done }()
	go func() { defer close(done); parkHere(release) }()
	parked := func(g string) bool { return strings.Contains(g, "[chan receive") && strings.Contains(g, "parkHere(") }
	if reports, _ := run(t, func(tb testing.TB) { testkit.WaitStack(tb, 10*time.Second, "parked", parked) }); len(reports) != 0 {
		t.Errorf("WaitStack for a parked goroutine: %q", reports)
	}
	never := func(string) bool { return false }
	if _, fatal := run(t, func(tb testing.TB) { testkit.WaitStack(tb, 10*time.Millisecond, "nothing", never) }); !fatal {
		t.Error("WaitStack for no goroutine: no failure at its bound")
	}
}

func TestCaptureLog(t *testing.T) {
	logger, logs := testkit.CaptureLog()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { logger.Info("hit", "n", i) })
	}
	wg.Wait()
	if n := strings.Count(logs.String(), "msg=hit"); n != 4 {
		t.Errorf("got %d lines, want 4:\n%s", n, logs)
	}
}

func TestCaptureDefaultLog(t *testing.T) {
	before := slog.Default()
	t.Run("captured", func(t *testing.T) {
		logs := testkit.CaptureDefaultLog(t)
		slog.Warn("through the default")
		if !strings.Contains(logs.String(), "through the default") {
			t.Errorf("got %q, want the default logger's line", logs)
		}
	})
	if slog.Default() != before {
		t.Error("the default logger was not restored when the test ended")
	}
}
