package count

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store/driver"
)

func keys(v *view) []string {
	var ks []string
	for k := range v.counts {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestViewForget(t *testing.T) {
	const window = time.Minute
	tests := []struct {
		name string
		at   time.Duration // forget's now, from t0
		max  int
		want []string
	}{
		{"nothing closed yet", 59 * time.Second, 10, []string{"a", "b", "c", "d"}},
		{"windows closing now go", time.Minute, 10, []string{"c", "d"}},
		{"at most max per call", 2 * time.Minute, 1, []string{"b", "c", "d"}},
		{"every closed window goes", 2 * time.Minute, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newView(0)
			v.open("a", driver.State{Start: t0})
			v.open("b", driver.State{Start: t0})
			v.open("c", driver.State{Start: t0.Add(30 * time.Second)})
			v.open("d", driver.State{Start: t0.Add(45 * time.Second)})
			v.forget(t0.Add(tt.at), window, tt.max)
			if got := keys(v); !slices.Equal(got, tt.want) {
				t.Errorf("got keys %q, want %q", got, tt.want)
			}
		})
	}
}

func TestViewForgetKeepsAReopenedWindow(t *testing.T) {
	const window = time.Minute
	v := newView(0)
	v.open("a", driver.State{Start: t0})
	v.open("a", driver.State{Start: t0.Add(time.Minute)}) // the key came back after its window closed
	v.forget(t0.Add(90*time.Second), window, 10)
	w, ok := v.counts["a"]
	if !ok || !w.start.Equal(t0.Add(time.Minute)) {
		t.Errorf("got (%+v, %v), want a's open window from %v kept", w, ok, t0.Add(time.Minute))
	}
	v.forget(t0.Add(2*time.Minute), window, 10)
	if _, ok := v.counts["a"]; ok {
		t.Error("got a kept after its second window closed, want it let go")
	}
}

func TestViewMemoryFollowsLiveKeys(t *testing.T) {
	const window, n = time.Minute, 5000
	v := newView(0)
	for i := range n {
		v.open(fmt.Sprintf("k%d", i), driver.State{Start: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	now := t0.Add(window + n*time.Millisecond)
	for range n / forgetPerHit {
		v.forget(now, window, forgetPerHit)
	}
	v.open("live", driver.State{Start: now})
	if len(v.counts) != 1 {
		t.Errorf("got %d keys in the view, want only the live one", len(v.counts))
	}
	if live := len(v.expiry) - v.head; live != 1 {
		t.Errorf("got %d pending expiry entries, want 1", live)
	}
	if len(v.expiry) > n/2 {
		t.Errorf("got an expiry list of %d entries for one live key, want it compacted", len(v.expiry))
	}
}

// TestLimiterForgetsClosedWindows checks the view through the counter:
// after the windows close, hits on any key let the old keys go.
func TestLimiterForgetsClosedWindows(t *testing.T) {
	rg := newLocalRig(t, 1, 5, time.Minute)
	l := rg.engine
	ctx := context.Background()
	for i := range 10 {
		if _, err := l.allow(ctx, fmt.Sprintf("old-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	rg.clock.Advance(time.Minute)
	for range 3 { // 3 hits × forgetPerHit >= 10
		if _, err := l.allow(ctx, "new", 1); err != nil {
			t.Fatal(err)
		}
	}
	// Read the view on its actor, the only goroutine that may touch it.
	reply := actor.NewReply[[]string]()
	if err := rg.pool.Send("new", func(shard int) { reply.Send(keys(l.c.(*local).views[shard]), nil) }); err != nil {
		t.Fatal(err)
	}
	got, err := reply.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new"}; !slices.Equal(got, want) {
		t.Errorf("got keys %q in the view, want %q", got, want)
	}
}

// An actor that gets no more hits still lets its closed windows go: its
// timer hands it a forget job once the oldest window closes.
func TestIdleActorForgets(t *testing.T) {
	// A window of 20ms: the timer's wait is computed on the fake clock, so
	// it fires after 20ms of real time and finds the fake clock not yet
	// moved, re-arms, and fires again until the test advances it.
	rg := newLocalRig(t, 2, 5, 20*time.Millisecond)
	l := rg.engine
	t.Cleanup(func() { l.Close(context.Background()) })
	ctx := context.Background()
	for i := range 50 {
		if _, err := l.allow(ctx, fmt.Sprintf("k-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	rg.clock.Advance(20 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for shard, v := range l.c.(*local).views {
			reply := actor.NewReply[int]()
			if err := rg.pool.SendShard(shard, false, func(int) { reply.Send(len(v.counts), nil) }); err != nil {
				t.Fatal(err)
			}
			n, err := reply.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			left += n
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still in the views 5s after their windows closed, with no hits", left)
		}
		time.Sleep(5 * time.Millisecond) // polling the actors: the timer has no event to wait on
	}
}

// Once most keys are gone the map is rebuilt, since Go maps keep their
// peak's memory.
func TestForgetRebuildsAShrunkMap(t *testing.T) {
	v := newView(0)
	for i := range 4096 {
		v.open(fmt.Sprintf("k-%d", i), driver.State{Start: t0})
	}
	v.open("late", driver.State{Start: t0.Add(time.Hour)})
	before := v.counts
	v.forget(t0.Add(time.Minute), time.Minute, 5000)
	if len(v.counts) != 1 {
		t.Fatalf("got %d keys after forgetting, want 1", len(v.counts))
	}
	if reflect.ValueOf(v.counts).UnsafePointer() == reflect.ValueOf(before).UnsafePointer() {
		t.Fatal("the map that held 4097 keys is still in use for 1: its memory is never given back")
	}
	if v.peak != 1 {
		t.Fatalf("peak = %d after the rebuild, want 1", v.peak)
	}
}
