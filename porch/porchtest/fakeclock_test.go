package porchtest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/porchtest"
)

var t0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

func TestFakeClock(t *testing.T) {
	c := porchtest.NewFakeClock(t0)
	c.Advance(time.Minute)
	if got, want := c.Wall(), t0.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after Advance: got wall %v, want %v", got, want)
	}
	if got := c.Monotonic(); got != time.Minute {
		t.Errorf("after Advance: got monotonic %v, want %v", got, time.Minute)
	}
	c.Jump(-time.Hour)
	if got, want := c.Wall(), t0.Add(time.Minute-time.Hour); !got.Equal(want) {
		t.Errorf("after Jump: got wall %v, want %v", got, want)
	}
	if got := c.Monotonic(); got != time.Minute {
		t.Errorf("after Jump: got monotonic %v, want %v (a jump is not elapsed time)", got, time.Minute)
	}
}

func TestFakeClockZeroValueStartsAtEpoch(t *testing.T) {
	var c porchtest.FakeClock
	if got := c.Wall(); !got.Equal(time.Unix(0, 0)) {
		t.Errorf("got wall %v, want the Unix epoch", got)
	}
	c.Advance(time.Second)
	if got := c.Wall(); !got.Equal(time.Unix(1, 0)) {
		t.Errorf("after Advance(1s): got wall %v, want %v", got, time.Unix(1, 0))
	}
}

func ExampleFakeClock() {
	c := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))

	c.Advance(time.Minute) // a minute passes
	c.Jump(-time.Hour)     // an operator sets the wall clock back

	fmt.Println("wall:     ", c.Wall().Format(time.TimeOnly))
	fmt.Println("monotonic:", c.Monotonic())
	// Output:
	// wall:      11:01:00
	// monotonic: 1m0s
}
