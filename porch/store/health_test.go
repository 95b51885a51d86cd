package store_test

// The tests of this package check the contract of driver.Store against both
// drivers.

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

var wall0 = time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)

// healthRig is a store whose writes a test can make fail and succeed again,
// as a read-only file or a full disk would, by planting a trigger that
// refuses every write to porch_rate_counters.
type healthRig struct {
	st    driver.Store
	clock *porchtest.FakeClock
	write func() error // one ordinary counter write, waited for
	fail  func()       // plant the trigger
	mend  func()       // remove it
}

type healthBackend struct {
	name string
	open func(t *testing.T) healthRig
}

var healthBackends = []healthBackend{
	{"sqlite", func(t *testing.T) healthRig {
		clock := porchtest.NewFakeClock(wall0)
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{Options: store.Options{Clock: clock}})
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		exec := func(q string) {
			t.Helper()
			if _, err := s.DB().Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return healthRig{
			st: s, clock: clock,
			write: func() error {
				done := make(chan error, 1)
				c := driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute}
				if err := s.SaveCounter(c, func(err error) { done <- err }); err != nil {
					return err
				}
				return <-done
			},
			fail: func() {
				exec(`CREATE TRIGGER refuse BEFORE INSERT ON porch_rate_counters
					BEGIN SELECT RAISE(ABORT, 'writes refused'); END`)
				exec(`CREATE TRIGGER refuse_journal BEFORE INSERT ON porch_rate_journal
					BEGIN SELECT RAISE(ABORT, 'writes refused'); END`)
			},
			mend: func() {
				exec(`DROP TRIGGER refuse`)
				exec(`DROP TRIGGER refuse_journal`)
			},
		}
	}},
	{"postgres", func(t *testing.T) healthRig {
		dsn := pgtest.DSN(t)
		clock := porchtest.NewFakeClock(wall0)
		p := pgstore.Open(t, dsn, postgres.Options{Options: store.Options{Clock: clock}})
		exec := func(q string) {
			t.Helper()
			if _, err := p.Pool().Exec(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'writes refused'; END $$`)
		return healthRig{
			st: p, clock: clock,
			write: func() error {
				done := make(chan error, 1)
				if err := p.AddHit("k", algorithm.MustRule(algorithm.Fixed, 1<<40, time.Minute, 0), 1, driver.Lease{}, func(_ driver.Hit, err error) { done <- err }); err != nil {
					return err
				}
				return <-done
			},
			fail: func() {
				exec(`CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON porch_rate_counters
					FOR EACH ROW EXECUTE FUNCTION refuse()`)
			},
			mend: func() { exec(`DROP TRIGGER refuse ON porch_rate_counters`) },
		}
	}},
}

// health calls Health with a bound and reports its error.
func (r healthRig) health(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.st.Health(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("Health did not answer within 10s")
	}
	return err
}

// wantHealth polls Health n times and fails unless every answer is healthy
// (want nil) or wraps ErrUnhealthy.
func (r healthRig) wantHealth(t *testing.T, n int, healthy bool, when string) {
	t.Helper()
	for range n {
		err := r.health(t)
		if healthy && err != nil {
			t.Fatalf("%s: got Health() = %v, want nil", when, err)
		}
		if !healthy && !errors.Is(err, store.ErrUnhealthy) {
			t.Fatalf("%s: got Health() = %v, want ErrUnhealthy", when, err)
		}
	}
}

// A store that only answered a ping would report healthy throughout. Health
// must report the write failure, both when a write fails and when nothing is
// written at all (an idle store probes), and report recovery.
func TestHealthReportsWhetherWritesCommit(t *testing.T) {
	for _, b := range healthBackends {
		t.Run(b.name, func(t *testing.T) {
			tests := []struct {
				name  string
				after func(r healthRig) // between planting the trigger and asking
			}{
				{"idle store probes", func(r healthRig) { r.clock.Advance(commit.HealthMaxAge) }},
				{"a failed write is reported at once", func(r healthRig) {
					if err := r.write(); err == nil {
						t.Fatal("a write under the trigger committed, want it refused")
					}
				}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := b.open(t)
					r.wantHealth(t, 1, true, "fresh store")
					r.fail()
					tt.after(r)
					r.wantHealth(t, 3, false, "writes refused")
					r.mend()
					r.clock.Advance(commit.HealthMaxAge)
					r.wantHealth(t, 3, true, "writes committing again")
					if err := r.write(); err != nil {
						t.Fatalf("a write after the trigger went: %v", err)
					}
				})
			}
		})
	}
}

// /healthz may be polled without limit: polling an idle store must not queue
// a write per call, only one probe per HealthMaxAge.
func TestHealthPollingCommitsOneProbePerMaxAge(t *testing.T) {
	for _, b := range healthBackends {
		t.Run(b.name, func(t *testing.T) {
			r := b.open(t)
			for round := int64(1); round <= 3; round++ {
				done := make(chan struct{})
				for range 4 { // concurrent pollers share the probe or its outcome
					go func() {
						defer func() { done <- struct{}{} }()
						for range 25 {
							if err := r.st.Health(context.Background()); err != nil {
								t.Errorf("Health: %v", err)
							}
						}
					}()
				}
				for range 4 {
					<-done
				}
				if got := r.st.Stats().Commits; got != round {
					t.Fatalf("round %d: got %d commits after 100 polls, want %d (one probe per round)", round, got, round)
				}
				r.clock.Advance(commit.HealthMaxAge)
			}
		})
	}
}
