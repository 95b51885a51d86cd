package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

const (
	// boundTimeout is the stores' Options.Timeout in these tests.
	boundTimeout = 500 * time.Millisecond
	// answerWithin is how long a test waits for any answer before it
	// calls the wait unbounded: far more than the two bounds (and their
	// cancels) a request may wait, so that a loaded machine does not fail
	// it, and far less than forever, which is what it was.
	answerWithin = 10 * time.Second
	// healWithin is how long a store may take to count again once the
	// standby is back.
	healWithin = 30 * time.Second
)

// A synchronous standby that stops confirming commits (here
// synchronous_standby_names names one that never connects, which is what
// a killed standby leaves behind) must not hang anything a request waits
// for: at SurvivesPowerLoss every hit, concurrent or one after another, is
// answered with an error within the bound, Health says why, and an
// idempotency owner's Save fails in time and its retry finds the response
// (committed on the primary alone, as PostgreSQL does with a cancelled
// wait). At SurvivesProcessCrash, hits wait for no standby: Health, a
// take-back and a reset must not make them wait either. Once the standby
// is back, the same store counts again, no restart.
func TestDeadSynchronousStandbyBoundsEveryWait(t *testing.T) {
	srv := pgtest.Private(t)
	for _, tc := range []struct {
		name       string
		durability store.Durability
	}{
		{"power-loss", store.SurvivesPowerLoss},
		{"process-crash", store.SurvivesProcessCrash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Health answers from the last outcome for HealthMaxAge: the
			// fake clock moves past it, so that Health probes.
			clk := porchtest.NewFakeClock(time.Now())
			p := openInternal(t, privateSchema(t, srv, tc.name),
				Options{Options: store.Options{Durability: tc.durability, Clock: clk}, Timeout: boundTimeout})
			rule := fixed(1000, time.Hour)
			if err := hitWithin(t, p, "rate:warm", rule); err != nil {
				t.Fatalf("a hit before the standby died: %v", err)
			}

			killStandby(t, srv)
			if tc.durability == store.SurvivesPowerLoss {
				hitsFailInTime(t, p, rule)
				clk.Advance(commit.HealthMaxAge)
				if err := healthWithin(t, p); !errors.Is(err, store.ErrUnhealthy) {
					t.Errorf("Health with no standby confirming: got %v, want store.ErrUnhealthy", err)
				}
			} else {
				clk.Advance(commit.HealthMaxAge)
				hitsGoOn(t, p, rule)
			}
			ownerFailsInTimeAndReplays(t, p)

			reviveStandby(t, srv)
			start := time.Now()
			waitWithin(t, healWithin, "a hit is counted again", func() bool { return hitWithin(t, p, "rate:healed", rule) == nil })
			waitWithin(t, healWithin, "Health is nil again", func() bool {
				clk.Advance(commit.HealthMaxAge)
				return healthWithin(t, p) == nil
			})
			t.Logf("healed %s after the standby came back", time.Since(start).Round(time.Millisecond))
		})
	}
}

// hitsFailInTime checks that hits, concurrent and then one batch after
// another, are each answered within the bound with the store's failure,
// and that the committer counts them as failed.
func hitsFailInTime(t *testing.T, p *Store, rule driver.Rule) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() { errs[i] = hitWithin(t, p, fmt.Sprintf("rate:c%d", i%4), rule) })
	}
	wg.Wait()
	for i := range 3 {
		errs = append(errs, hitWithin(t, p, fmt.Sprintf("rate:s%d", i), rule))
	}
	for i, err := range errs {
		if !errors.Is(err, errLate) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("hit %d: got %v, want the store's late-commit error, not a deadline (which reads as the request's own end)", i, err)
		}
	}
	if p.Stats().Failed == 0 {
		t.Errorf("Stats().Failed = 0 after batches that failed, want more")
	}
}

// hitsGoOn checks that at SurvivesProcessCrash hits are counted while
// Health probes (failing: a stored response's commit waits for the
// standby), and after a take-back and a reset, which commit at the
// hits' level.
func hitsGoOn(t *testing.T, p *Store, rule driver.Rule) {
	t.Helper()
	health := make(chan error, 1)
	go func() { health <- healthWithin(t, p) }() // joined below
	for i := range 5 {
		if err := hitWithin(t, p, "rate:pc", rule); err != nil {
			t.Errorf("hit %d while Health probes: %v", i, err)
		}
	}
	if err := <-health; !errors.Is(err, store.ErrUnhealthy) {
		t.Errorf("Health with no standby confirming: got %v, want store.ErrUnhealthy (a stored response cannot commit)", err)
	}
	if err := answer(t, "TakeBack", func(done func(error)) error {
		return p.TakeBack("rate:pc", time.Now(), 1, done)
	}); err != nil {
		t.Errorf("TakeBack: %v", err)
	}
	if err := answer(t, "ResetHit", func(done func(error)) error { return p.ResetHit("rate:pc", done) }); err != nil {
		t.Errorf("ResetHit: %v", err)
	}
	for i := range 5 {
		if err := hitWithin(t, p, "rate:pc", rule); err != nil {
			t.Errorf("hit %d after a take-back and a reset: %v", i, err)
		}
	}
}

// ownerFailsInTimeAndReplays checks that an owner's Save, whose COMMIT
// waits for the standby, fails within the bound with the store's failure,
// and that the retry with the same key finds the response stored: the
// wait was cancelled, and the commit happened on the primary.
func ownerFailsInTimeAndReplays(t *testing.T, p *Store) {
	t.Helper()
	key := "idem:" + t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	r, err := p.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	start := time.Now()
	err = r.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201, Body: []byte("done")}, time.Hour)
	if took := time.Since(start); took > answerWithin {
		t.Errorf("Save took %s, want an answer within %s", took, answerWithin)
	}
	if !errors.Is(err, errLate) || errors.Is(err, store.ErrWriteFailed) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Save with no standby confirming: got %v, want the store's late-commit error (not ErrWriteFailed: it committed)", err)
	}
	retry, err := p.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve of the retry: %v (the first owner's backend still holds the key?)", err)
	}
	defer retry.Release()
	res, ok, err := retry.Load(ctx)
	if err != nil || !ok || string(res.Body) != "done" {
		t.Errorf("the retry's Load: got %q, %v, %v; want the stored response, replayed", res.Body, ok, err)
	}
}

// hitWithin counts one hit of key and returns its error (see answer).
func hitWithin(t *testing.T, p *Store, key string, rule driver.Rule) error {
	t.Helper()
	return answer(t, "hit of "+key, func(done func(error)) error {
		return p.AddHit(key, rule, 1, driver.Lease{}, func(_ driver.Hit, err error) { done(err) })
	})
}

// healthWithin runs Health and returns its error (see answer).
func healthWithin(t *testing.T, p *Store) error {
	t.Helper()
	return answer(t, "Health", func(done func(error)) error {
		go func() { done(p.Health(context.Background())) }() // answer waits for it, or fails t
		return nil
	})
}

// answer starts an operation that reports through done, and returns its
// outcome, or errNoAnswer, failing t, if none comes within answerWithin.
func answer(t *testing.T, what string, start func(done func(error)) error) error {
	t.Helper()
	ch := make(chan error, 1)
	if err := start(func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-time.After(answerWithin):
		t.Errorf("%s: no answer within %s", what, answerWithin) // not Fatalf: goroutines call it
		return errNoAnswer
	}
}

// errNoAnswer is answer's error for an operation that did not answer.
var errNoAnswer = errors.New("no answer")

// privateSchema creates a schema of its own on srv and returns a DSN that
// works in it.
func privateSchema(t *testing.T, srv *pgtest.Server, name string) string {
	t.Helper()
	schema := "s_" + sanitize(name)
	conn := connect(t, srv)
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	return pgtest.WithParam(srv.DSN, "search_path", schema)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

func connect(t *testing.T, srv *pgtest.Server) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// killStandby makes srv wait, on every commit at its level, for a
// synchronous standby that never comes, and returns once a commit does.
func killStandby(t *testing.T, srv *pgtest.Server) {
	t.Helper()
	conn := connect(t, srv)
	_, err := conn.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS public.commit_check (n int)`)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv.Set(t, "synchronous_standby_names", "'nobody'")
	t.Cleanup(func() { reviveStandby(t, srv) }) // if t stops before it does
	waitWithin(t, healWithin, "a commit waits for the missing standby", func() bool { return !commits(t, srv) })
}

// reviveStandby undoes killStandby: the waiting commits go through.
func reviveStandby(t *testing.T, srv *pgtest.Server) {
	t.Helper()
	srv.Set(t, "synchronous_standby_names", "''")
}

// commits reports whether a transaction that writes commits within a
// moment. One that does not is cancelled on the server (it then commits
// on the primary alone), so that none is left waiting.
func commits(t *testing.T, srv *pgtest.Server) bool {
	t.Helper()
	cfg, err := pgx.ParseConfig(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cancelOnServer(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer qcancel()
	_, err = conn.Exec(qctx, `INSERT INTO public.commit_check VALUES (1)`)
	return err == nil && qctx.Err() == nil
}

// waitWithin polls cond until it holds, failing t after d.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond) // a poll's pace, not a synchronisation
	}
}

// The default bound: zero is defaultTimeout, negative is refused, and a
// request's longest wait under it, two batches each cancelled and given
// cancelGrace to answer, stays under the 10 s a request may wait.
func TestTimeoutDefault(t *testing.T) {
	if worst := 2 * (defaultTimeout + cancelGrace); worst >= 10*time.Second {
		t.Errorf("2 × (defaultTimeout + cancelGrace) = %s, want under 10s", worst)
	}
	dsn := pgtest.DSN(t)
	p := openInternal(t, dsn, Options{})
	if p.opt.Timeout != defaultTimeout {
		t.Errorf("Options.Timeout zero: got %s, want defaultTimeout %s", p.opt.Timeout, defaultTimeout)
	}
	if p, err := Open(context.Background(), dsn, Options{Timeout: -time.Second}); err == nil {
		p.Close(context.Background())
		t.Errorf("Open accepted a negative Timeout")
	}
}
