package testkit

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Stacks returns the stack of every goroutine, one string each, as
// runtime.Stack prints them: a header line ("goroutine 7 [chan send]:")
// and then the frames. A goroutine parked on a channel is registered
// nowhere a test could ask, so its stack is the one place to find it
// without a hook in the code under test.
func Stacks() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// CountStacks returns how many goroutines have frame (a function as a
// stack trace names it, e.g. "porch/idem.(*Keys).wait(") on their stack.
func CountStacks(frame string) int {
	n := 0
	for _, g := range Stacks() {
		if strings.Contains(g, frame) {
			n++
		}
	}
	return n
}

// WaitStacks polls, every millisecond, until exactly n goroutines have
// frame on their stack (see CountStacks). It fails tb as soon as more do,
// or once within has passed: a test waits for what it checks, with a
// generous bound, and never sleeps for it.
func WaitStacks(tb testing.TB, frame string, n int, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		got := CountStacks(frame)
		if got == n {
			return
		}
		if got > n || time.Now().After(deadline) {
			tb.Fatalf("goroutines in %s: got %d, want %d", frame, got, n)
		}
		<-tick.C
	}
}

// WaitStack polls, every millisecond, until some goroutine's stack (see
// Stacks) satisfies match, and fails tb, naming what it waited for, if
// none does within.
func WaitStack(tb testing.TB, within time.Duration, what string, match func(stack string) bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for _, g := range Stacks() {
			if match(g) {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, within)
		}
		<-tick.C
	}
}
