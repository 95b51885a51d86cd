package idem_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/internal/actor"
)

// TestSaturatedPool: with the only actor busy and its mailbox full, a keyed
// request is refused 503 with Retry-After and its handler does not run; once
// the actor drains, the same key runs normally (nothing was reserved).
func TestSaturatedPool(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{pool: porch.PoolOptions{Size: 1, Mailbox: 1}}, o)

	busy, unblock, drained := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(free)
	if err := actor.Of(e.pool).Send("blocker", func(int) { close(busy); <-unblock }); err != nil {
		t.Fatalf("send the blocking job: %v", err)
	}
	select {
	case <-busy:
	case <-time.After(waitLimit):
		t.Fatal("the blocking job never ran")
	}
	if err := actor.Of(e.pool).Send("filler", func(int) { close(drained) }); err != nil {
		t.Fatalf("fill the mailbox: %v", err)
	}

	got := e.do(t, http.MethodPost, "/orders", "one", "k")
	wantProblem(t, got, http.StatusServiceUnavailable, idem.ProblemUnavailable)
	wantRetryAfter(t, got)
	if n := o.calls.Load(); n != 0 {
		t.Errorf("handler calls while saturated: got %d, want 0", n)
	}

	free()
	select {
	case <-drained:
	case <-time.After(waitLimit):
		t.Fatal("the mailbox never drained")
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); got.status != http.StatusCreated || got.replayed() {
		t.Errorf("same key once drained: got %s replayed=%v, want a fresh 201", got, got.replayed())
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}
}

// failWrites makes every insert into porch_idem_responses fail until the
// returned function drops the trigger.
func failWrites(t *testing.T, e *env) (heal func()) {
	t.Helper()
	db := e.store.DB()
	if _, err := db.Exec(`CREATE TRIGGER idem_boom BEFORE INSERT ON porch_idem_responses
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
	return func() {
		t.Helper()
		if _, err := db.Exec(`DROP TRIGGER idem_boom`); err != nil {
			t.Fatalf("drop trigger: %v", err)
		}
	}
}

// TestFailedWrite: a response that cannot be made durable is not sent. The
// owner's client gets 503, and the key is not wedged: once the store works,
// a retry runs the handler and its response is stored.
func TestFailedWrite(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{}, o)
	heal := failWrites(t, e)

	got := e.do(t, http.MethodPost, "/orders", "one", "k")
	wantProblem(t, got, http.StatusServiceUnavailable, idem.ProblemUnavailable)
	wantRetryAfter(t, got)
	if bytes.Contains(got.body, []byte(`"call"`)) {
		t.Errorf("owner body: got the handler's response %q, want it withheld", got.body)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}
	if n := e.rows(t); n != 0 {
		t.Errorf("stored responses: got %d, want 0", n)
	}

	heal()
	retry := e.do(t, http.MethodPost, "/orders", "one", "k")
	if retry.status != http.StatusCreated || retry.replayed() {
		t.Errorf("retry once healed: got %s replayed=%v, want a fresh 201", retry, retry.replayed())
	}
	if n := o.calls.Load(); n != 2 {
		t.Errorf("handler calls: got %d, want 2", n)
	}
	if n := e.rows(t); n != 1 {
		t.Errorf("stored responses: got %d, want 1", n)
	}
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() || !bytes.Equal(got.body, retry.body) {
		t.Errorf("replay: got %s replayed=%v, want a replay of %q", got, got.replayed(), retry.body)
	}
}

// TestFailedWriteWithParkedDuplicates: duplicates parked behind an owner
// whose write fails get 503 too; none of them runs the handler.
func TestFailedWriteWithParkedDuplicates(t *testing.T) {
	const dups = 3
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same("one"), same("k"))
	g.waitEntered(t)
	parkedDups := e.sendAll(t, dups, http.MethodPost, "/orders", same("one"), same("k"))
	waitParked(t, dups, o, 1)
	heal := failWrites(t, e)
	g.open()

	wantProblem(t, owner()[0], http.StatusServiceUnavailable, idem.ProblemUnavailable)
	for _, got := range parkedDups() {
		wantProblem(t, got, http.StatusServiceUnavailable, idem.ProblemUnavailable)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("handler calls: got %d, want 1", n)
	}

	heal()
	if got := e.do(t, http.MethodPost, "/orders", "one", "k"); got.status != http.StatusCreated || got.replayed() {
		t.Errorf("retry once healed: got %s replayed=%v, want a fresh 201", got, got.replayed())
	}
}
