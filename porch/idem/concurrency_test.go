package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/idem"
)

// held is a handler whose every call waits on g before answering created.
func held(g *gate) *orders {
	return &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		g.hold()
		created(n, w, r)
	}}
}

// TestConcurrentDuplicatesRunOnce: K identical requests in flight at once,
// the owner held inside the handler until all the others are parked. A
// design that stores after the handler would let every one of them in.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	const k = 30
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	wait := e.sendAll(t, k, http.MethodPost, "/orders", same(`{"sku":1}`), same("dup"))
	g.waitEntered(t)
	waitParked(t, k-1, o, 1)
	g.open()
	results := wait()

	fresh := 0
	for i, got := range results {
		if got.status != http.StatusCreated {
			t.Errorf("request %d: got %s, want 201", i, got)
		}
		if !bytes.Equal(got.body, results[0].body) {
			t.Errorf("request %d body: got %q, want %q", i, got.body, results[0].body)
		}
		if !got.replayed() {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("responses not marked replayed: got %d, want 1 (the owner's)", fresh)
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
	if got := e.rows(t); got != 1 {
		t.Errorf("stored responses: got %d, want 1", got)
	}
}

// TestConcurrentDistinctKeys: K different keys are K executions, and they run
// side by side: every handler call is inside the handler at once before any
// is let go.
func TestConcurrentDistinctKeys(t *testing.T) {
	const k = 30
	entered := make(chan struct{}, k)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		created(n, w, r)
	}}
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(open)

	wait := e.sendAll(t, k, http.MethodPost, "/orders", same("one"), func(i int) string { return fmt.Sprintf("key-%d", i) })
	for i := range k {
		select {
		case <-entered:
		case <-time.After(waitLimit):
			t.Fatalf("handler calls in flight at once: got %d, want %d", i, k)
		}
	}
	open()
	results := wait()

	bodies := make(map[string]bool)
	for i, got := range results {
		if got.status != http.StatusCreated || got.replayed() {
			t.Errorf("request %d: got %s replayed=%v, want a fresh 201", i, got, got.replayed())
		}
		bodies[string(got.body)] = true
	}
	if len(bodies) != k {
		t.Errorf("distinct responses: got %d, want %d", len(bodies), k)
	}
	if got := o.calls.Load(); got != k {
		t.Errorf("handler calls: got %d, want %d", got, k)
	}
	if got := e.rows(t); got != k {
		t.Errorf("stored responses: got %d, want %d", got, k)
	}
}

// TestFailedOwnerHandsOver: an owner whose handler fails (5xx or panic)
// stores nothing, and exactly one parked duplicate becomes the new owner;
// every other duplicate gets that one's response.
func TestFailedOwnerHandsOver(t *testing.T) {
	const dups = 5
	tests := []struct {
		name string
		fail func(w http.ResponseWriter)
	}{
		{"500", func(w http.ResponseWriter) { http.Error(w, "db down", http.StatusInternalServerError) }},
		{"503", func(w http.ResponseWriter) { http.Error(w, "later", http.StatusServiceUnavailable) }},
		{"panic", func(http.ResponseWriter) { panic("boom") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					g.hold()
					tc.fail(w)
					return
				}
				created(n, w, r)
			}}
			e := newEnv(t, envConfig{}, o)
			t.Cleanup(g.open)

			owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
			g.waitEntered(t)
			parkedDups := e.sendAll(t, dups, http.MethodPost, "/orders", same("one"), same("k"))
			waitParked(t, dups, o, 1)
			g.open()

			if got := owner()[0]; got.status < 500 {
				t.Errorf("failed owner: got %s, want its 5xx", got)
			}
			results := parkedDups()
			fresh := 0
			for i, got := range results {
				if got.status != http.StatusCreated {
					t.Errorf("duplicate %d: got %s, want the new owner's 201", i, got)
				}
				if !bytes.Equal(got.body, results[0].body) {
					t.Errorf("duplicate %d body: got %q, want %q", i, got.body, results[0].body)
				}
				if !got.replayed() {
					fresh++
				}
			}
			if fresh != 1 {
				t.Errorf("duplicates that ran the handler themselves: got %d, want 1", fresh)
			}
			if got := o.calls.Load(); got != 2 {
				t.Errorf("handler calls: got %d, want 2", got)
			}
			if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, results[0].body) {
				t.Errorf("later retry: got %s replayed=%v, want a replay of %q", got, got.replayed(), results[0].body)
			}
		})
	}
}

// TestParkedCallerLeaves: a parked duplicate whose request context ends
// returns at once; the owner still completes and stores, and the other
// parked duplicate and later retries get its response.
func TestParkedCallerLeaves(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)
	stayer := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := make(chan result, 1)
	go func() { left <- e.serve(keyed("one", "k").WithContext(ctx)) }()
	waitParked(t, 2, o, 1)

	cancel()
	select {
	case got := <-left:
		if got.status == http.StatusCreated {
			t.Errorf("caller that left: got %s before the owner finished, want a refusal", got)
		}
	case <-time.After(waitLimit):
		t.Fatal("the parked caller whose context ended did not return")
	}
	waitParked(t, 1, o, 1)

	g.open()
	first := owner()[0]
	if first.status != http.StatusCreated || first.replayed() {
		t.Errorf("owner: got %s replayed=%v, want a fresh 201", first, first.replayed())
	}
	if got := stayer()[0]; !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("duplicate that stayed: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("later retry: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestOwnerLeaves: the owner's client going away does not stop the owner from
// storing its response; the parked duplicate and a later retry replay it.
func TestOwnerLeaves(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	owner := make(chan result, 1)
	go func() { owner <- e.serve(keyed("one", "k").WithContext(ctx)) }()
	g.waitEntered(t)
	dup := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	waitParked(t, 1, o, 1)

	cancel()
	g.open()
	var first result
	select {
	case first = <-owner:
	case <-time.After(waitLimit):
		t.Fatal("the owner whose client left did not finish")
	}
	if first.status != http.StatusCreated {
		t.Errorf("owner: got %s, want 201", first)
	}
	if got := dup()[0]; !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("parked duplicate: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("later retry: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestMaxWait: a duplicate parked longer than MaxWait is answered 409 with
// Retry-After, the draft's in-flight answer; the owner is unaffected.
func TestMaxWait(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{opt: idem.Options{MaxWait: 20 * time.Millisecond}}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)

	got := e.do(t, http.MethodPost, "/orders", "one", "k")
	wantProblem(t, got, http.StatusConflict, idem.ProblemInFlight)
	wantRetryAfter(t, got)
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}

	g.open()
	first := owner()[0]
	if first.status != http.StatusCreated {
		t.Errorf("owner: got %s, want 201", first)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("retry after the owner finished: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
}

// TestReusedKeyWhileInFlight: a different request under a key whose owner is
// still running parks like any duplicate and, once the owner has stored its
// response, is refused 422 as a replay of it would be. A digest folded into
// the lookup key would instead let it run the handler alongside the owner.
func TestReusedKeyWhileInFlight(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)
	other := e.sendAll(t, 1, http.MethodPost, "/orders", same("two"), same("k"))
	waitParked(t, 1, o, 1)
	g.open()

	first := owner()[0]
	wantProblem(t, other()[0], http.StatusUnprocessableEntity, idem.ProblemKeyReused)
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, first.body) {
		t.Errorf("original: got %s replayed=%v, want a replay of %q", got, got.replayed(), first.body)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}
}

// TestReusedKeyBehindFailedOwner: when the owner stores nothing (a 5xx), a
// parked request with a different body is not refused: nothing is stored for
// the key, so it leads afresh and runs with its own body.
func TestReusedKeyBehindFailedOwner(t *testing.T) {
	g := newGate()
	o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			g.hold()
			http.Error(w, "db down", http.StatusInternalServerError)
			return
		}
		created(n, w, r)
	}}
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)
	other := e.sendAll(t, 1, http.MethodPost, "/orders", same("two"), same("k"))
	waitParked(t, 1, o, 1)
	g.open()

	if got := owner()[0]; got.status != http.StatusInternalServerError {
		t.Errorf("owner: got %s, want 500", got)
	}
	got := other()[0]
	if got.status != http.StatusCreated || got.replayed() || !bytes.Contains(got.body, []byte(`"body":"two"`)) {
		t.Errorf("different body behind a failed owner: got %s replayed=%v, want a fresh 201 for its own body",
			got, got.replayed())
	}
	if n := o.calls.Load(); n != 2 {
		t.Errorf("handler calls: got %d, want 2", n)
	}
}

// TestReusedKeyBeforeInFlight: a different request under a key whose owner
// is still running, parked past MaxWait, is told 422 (it reused the key),
// not 409 (retry later): the draft's order, and a client retrying a 409
// would only have been refused later. The same request still gets 409.
func TestReusedKeyBeforeInFlight(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{opt: idem.Options{MaxWait: 20 * time.Millisecond}}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)

	wantProblem(t, e.do(t, http.MethodPost, "/orders", "two", "k"), http.StatusUnprocessableEntity, idem.ProblemKeyReused)
	wantProblem(t, e.do(t, http.MethodPost, "/orders", "one", "k"), http.StatusConflict, idem.ProblemInFlight)
	g.open()
	if first := owner()[0]; first.status != http.StatusCreated {
		t.Errorf("owner: got %s, want 201", first)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}
}
