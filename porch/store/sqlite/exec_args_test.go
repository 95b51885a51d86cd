package sqlite_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	porchdriver "github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// panickingValue is an application's argument type whose Value panics.
type panickingValue struct{}

func (panickingValue) Value() (driver.Value, error) { panic("broken Value") }

// blockingValue is an argument whose Value waits for release: a slow
// encoder, or one that takes a lock.
type blockingValue struct{ entered, release chan struct{} }

func (b blockingValue) Value() (driver.Value, error) {
	close(b.entered)
	<-b.release
	return "v", nil
}

// An argument's Value method is the application's code: it runs on the
// caller's goroutine, in Exec, not on the committer that every write of
// the process shares. A panic in it is the caller's to recover (its
// handler's recovery middleware), where on the committer it killed the
// process; and a slow one holds up its caller alone, where on the
// committer every limiter hit and stored response waited behind it,
// beyond any ExecBudget.
func TestExecArgumentValuesRunOnTheCaller(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{})
	if _, err := s.DB().Exec(`CREATE TABLE ledger (id TEXT PRIMARY KEY, v)`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("panic", func(t *testing.T) {
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			s.Exec(ctx, `INSERT INTO ledger (id, v) VALUES ('p', ?)`, panickingValue{}) //nolint:errcheck // it panics
		}()
		if recovered == nil {
			t.Fatal("Exec with an argument whose Value panics: no panic on the caller")
		}
		if err := s.Exec(ctx, `INSERT INTO ledger (id) VALUES ('after')`); err != nil {
			t.Fatalf("Exec after the panic: %v", err)
		}
	})

	t.Run("slow", func(t *testing.T) {
		b := blockingValue{entered: make(chan struct{}), release: make(chan struct{})}
		execDone := make(chan error, 1)
		go func() { execDone <- s.Exec(ctx, `INSERT INTO ledger (id, v) VALUES ('slow', ?)`, b) }()
		<-b.entered
		counter := make(chan error, 1)
		c := porchdriver.Counter{Key: "k", State: porchdriver.State{Start: s.Now(), Count: 1}, Window: time.Hour}
		if err := s.SaveCounter(c, func(err error) { counter <- err }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-counter:
			if err != nil {
				t.Errorf("counter: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("a counter write waited 5 s behind an Exec argument's Value")
		}
		close(b.release)
		if err := <-execDone; err != nil {
			t.Fatalf("slow Exec: %v", err)
		}
	})

	t.Run("unconvertible", func(t *testing.T) {
		// An owner's argument that does not convert fails the owner, as a
		// failed statement does: Save stores nothing, not the response
		// without the statement.
		r, err := s.Reserve(ctx, "owner")
		if err != nil {
			t.Fatal(err)
		}
		r.Exec(ctx, `INSERT INTO ledger (id) VALUES ('owner-1')`)                   //nolint:errcheck // reported by Save
		r.Exec(ctx, `INSERT INTO ledger (id, v) VALUES ('owner-2', ?)`, struct{}{}) //nolint:errcheck // reported by Save
		err = r.Save(ctx, porchdriver.Response{Digest: []byte{1}, Status: 201, Body: []byte("ok")}, time.Hour)
		if !errors.Is(err, store.ErrWriteFailed) {
			t.Fatalf("Save after an unconvertible argument: %v, want store.ErrWriteFailed", err)
		}
		var n int
		if err := s.DB().QueryRow(`SELECT count(*) FROM ledger WHERE id LIKE 'owner-%'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("owner's rows: %d (%v), want none", n, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		again, err := s.Reserve(rctx, "owner")
		if err != nil {
			t.Fatalf("the key after the failed Save: %v, want it free", err)
		}
		again.Release()
	})
}
