package idem_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/porchtest"
)

// Every keyed request is told to the observer once, with its outcome; a
// request without a key, where none is required, is not idempotent and is
// not told.
func TestObserverCountsEveryOutcome(t *testing.T) {
	g := newGate()
	o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(idem.Header) == "slow" {
			g.hold()
		}
		created(n, w, r)
	}}
	obs := &porchtest.Observer{}
	e := newEnv(t, envConfig{
		opt:  idem.Options{MaxWait: 20 * time.Millisecond, MaxBody: 8, Observer: obs},
		pool: porch.PoolOptions{Size: 1, Mailbox: 1},
	}, o)
	t.Cleanup(g.open)

	steps := []struct {
		body   string
		keys   []string
		status int
	}{
		{"one", []string{"a"}, http.StatusCreated},                               // executed
		{"one", []string{"a"}, http.StatusCreated},                               // replayed
		{"two", []string{"a"}, http.StatusUnprocessableEntity},                   // mismatch
		{"one", []string{`"abc", "def"`}, http.StatusBadRequest},                 // invalid key
		{"far too long a body", []string{"b"}, http.StatusRequestEntityTooLarge}, // invalid body
		{"one", nil, http.StatusCreated},                                         // no key: not told
	}
	for i, s := range steps {
		if got := e.do(t, http.MethodPost, "/orders", s.body, s.keys...); got.status != s.status {
			t.Fatalf("step %d: got %s, want status %d", i, got, s.status)
		}
	}
	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("slow")) // executed
	g.waitEntered(t)
	if got := e.do(t, http.MethodPost, "/orders", "one", "slow"); got.status != http.StatusConflict {
		t.Fatalf("a duplicate past MaxWait: got %s, want 409", got)
	}
	g.open()
	owner()

	release := fillActor(t, e.pool)
	if got := e.do(t, http.MethodPost, "/orders", "one", "c"); got.status != http.StatusServiceUnavailable {
		t.Fatalf("on a saturated pool: got %s, want 503", got)
	}
	release()

	for _, c := range []struct {
		o    idem.Outcome
		want int
	}{
		{idem.Executed, 2}, {idem.Replayed, 1}, {idem.Mismatch, 1},
		{idem.InFlight, 1}, {idem.Unavailable, 1}, {idem.Invalid, 2},
	} {
		if got := obs.Idem(c.o); got != c.want {
			t.Errorf("%s: got %d, want %d", c.o, got, c.want)
		}
	}
}

// fillActor parks the only actor of a one-actor, one-slot pool and fills
// its mailbox, so that the next Send is refused. release undoes it; it is
// idempotent and runs at cleanup.
func fillActor(t *testing.T, pool *porch.Pool) (release func()) {
	t.Helper()
	started, unblock, drained := make(chan struct{}), make(chan struct{}), make(chan struct{})
	if err := actor.Of(pool).Send("block", func(int) { close(started); <-unblock }); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := actor.Of(pool).Send("fill", func(int) { close(drained) }); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			close(unblock)
			<-drained
		}
	}
	t.Cleanup(release)
	return release
}

// A store failure is logged through Options.Logger.
func TestLoggerGetsStoreFailures(t *testing.T) {
	var buf porchtest.LogBuffer
	e := newEnv(t, envConfig{opt: idem.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))}}, new(orders))
	if _, err := e.store.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_idem_responses
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); got.status != http.StatusServiceUnavailable {
		t.Fatalf("got %s, want 503", got)
	}
	if got := buf.String(); !strings.Contains(got, "porch: could not decide or store") || !strings.Contains(got, "boom") {
		t.Errorf("got log %q, want the store failure", got)
	}
}

// panicOnce is an observer whose first idem.Executed panics, as a buggy
// metrics adapter might.
type panicOnce struct {
	porchtest.Observer
	panicked atomic.Bool
}

func (p *panicOnce) IdemOutcome(ctx context.Context, o idem.Outcome) {
	if o == idem.Executed && p.panicked.CompareAndSwap(false, true) {
		panic("observer bug")
	}
	p.Observer.IdemOutcome(ctx, o)
}

// An observer that panics once the request has reserved its key must not
// leave the key reserved: the chain turns the panic into a 500 without
// running this middleware's After, so Before must hand the key back itself,
// or every retry of the key waits for an owner that is gone (and, on
// PostgreSQL, a key connection is held for good).
func TestObserverPanicHandsTheKeyBack(t *testing.T) {
	o := &orders{}
	e := newEnv(t, envConfig{opt: idem.Options{MaxWait: 2 * time.Second, Observer: &panicOnce{}}}, o)
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); got.status != http.StatusInternalServerError {
		t.Fatalf("the request whose observer panicked: got %s, want 500", got)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); got.status != http.StatusCreated || got.replayed() {
		t.Fatalf("its retry: got %s (replayed %v), want the handler's 201", got, got.replayed())
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once", n)
	}
}

func TestOutcomeLabels(t *testing.T) {
	tests := []struct {
		o    idem.Outcome
		want string
	}{
		{idem.Executed, "executed"},
		{idem.Replayed, "replayed"},
		{idem.Mismatch, "mismatch"},
		{idem.InFlight, "in_flight"},
		{idem.Unavailable, "unavailable"},
		{idem.Invalid, "invalid"},
	}
	for _, tt := range tests {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("idem.Outcome(%d): got label %q, want %q", tt.o, got, tt.want)
		}
	}
}
