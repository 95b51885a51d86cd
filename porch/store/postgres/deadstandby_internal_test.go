package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// These tests hold the store to its bound (Options.Timeout) where a
// commit can come back after it: a synchronous standby that never
// confirms, whose waits the server cancels by committing on the primary
// alone.

// serverCount runs a query returning one number on srv, outside any store.
func serverCount(t *testing.T, srv *pgtest.Server, q string, args ...any) int64 {
	t.Helper()
	conn := connect(t, srv)
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	var n int64
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// inSyncRep counts the backends waiting for a synchronous standby.
func inSyncRep(t *testing.T, srv *pgtest.Server) int64 {
	t.Helper()
	return serverCount(t, srv, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
}

// At SurvivesPowerLoss, a hit whose COMMIT comes back only after the bound
// (the server cancelled its wait for the standby and committed on the
// primary alone) is a count no standby holds: it must be answered with the
// late error, never as a success, also when its batch also had a key left
// over for the general path (countFitting, then countHits for the rest).
func TestHitsCommittedPastTheBoundFail(t *testing.T) {
	srv := pgtest.Private(t)
	p := openInternal(t, privateSchema(t, srv, "fitlate"),
		Options{Options: store.Options{Durability: store.SurvivesPowerLoss}, Timeout: boundTimeout})
	rule := fixed(1, time.Hour)
	if err := hitWithin(t, p, "rate:full", rule); err != nil {
		t.Fatalf("the hit that fills rate:full: %v", err)
	}
	killStandby(t, srv)
	for round := range 3 {
		// A batch waiting for the standby, so that the next two hits
		// queue behind it and share a batch: one key at its limit (left
		// over by countFitting), one that fits.
		blocker := make(chan error, 1)
		if err := p.AddHit(fmt.Sprintf("rate:blocker%d", round), fixed(1000, time.Hour), 1, driver.Lease{},
			func(_ driver.Hit, err error) { blocker <- err }); err != nil {
			t.Fatal(err)
		}
		waitWithin(t, answerWithin, "the blocking batch waits for the standby", func() bool { return inSyncRep(t, srv) > 0 })
		full, fresh := make(chan error, 1), make(chan error, 1)
		if err := p.AddHit("rate:full", rule, 1, driver.Lease{}, func(_ driver.Hit, err error) { full <- err }); err != nil {
			t.Fatal(err)
		}
		if err := p.AddHit(fmt.Sprintf("rate:fresh%d", round), rule, 1, driver.Lease{}, func(_ driver.Hit, err error) { fresh <- err }); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			ch   chan error
		}{{"blocking", blocker}, {"at its limit", full}, {"fitting", fresh}} {
			select {
			case err := <-c.ch:
				if !errors.Is(err, errLate) {
					t.Errorf("round %d: the %s key's hit: got %v, want the late-commit error (no standby holds it)", round, c.name, err)
				}
			case <-time.After(answerWithin):
				t.Fatalf("round %d: the %s key's hit: no answer within %s", round, c.name, answerWithin)
			}
		}
	}
}

// A Save whose COMMIT waits for a dead standby is cancelled past the bound
// (one cancel request, which the COMMIT uses up) and its connection
// closed. Whatever Save pipelined after the COMMIT then runs on a backend
// with no client: were it to wait for the standby too (a prune committed
// at the server's level), nothing would ever cancel it, and each such Save
// would leave a backend, and its row locks, until the standby returned.
// Every Save here claims the prune.
func TestSavesLeaveNoBackendWaitingForADeadStandby(t *testing.T) {
	srv := pgtest.Private(t)
	dsn := privateSchema(t, srv, "saveprune")
	p := openInternal(t, dsn, Options{Options: store.Options{PruneRows: 1}, Timeout: boundTimeout})
	// Expired responses, so that every prune finds work to do.
	conn := connect(t, srv)
	_, err := conn.Exec(context.Background(), `INSERT INTO s_saveprune.porch_idem_responses
		(key, digest, status, content_type, body, created_at, expires_at)
		SELECT convert_to('idem:old'||g, 'UTF8'), '', 200, '', '', 0, 1 FROM generate_series(1, 100) g`)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	killStandby(t, srv)
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
		r, err := p.Reserve(ctx, fmt.Sprintf("idem:save%d", i))
		if err != nil {
			cancel()
			t.Fatalf("Reserve %d: %v", i, err)
		}
		p.saves.next.Store(0) // the prune is due
		err = r.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201, Body: []byte("x")}, time.Hour)
		cancel()
		if !errors.Is(err, errLate) {
			t.Errorf("Save %d with no standby confirming: got %v, want the late-commit error", i, err)
		}
	}
	waitWithin(t, answerWithin, "no backend waits for the dead standby once every Save has answered",
		func() bool { return inSyncRep(t, srv) == 0 })
}

// An instance killed (kill -9, OOM) while its owner's COMMIT waits for a
// dead standby leaves a backend nobody cancels, holding the key's lock
// until the standby returns. The client's retry, on another instance, must
// not wait for it past the bound: Reserve gives up on the lock within
// Options.Timeout with store.ErrKeyHeld, which idem answers 409 with
// Retry-After, as for any owner still running.
func TestReserveBehindAnOrphanedOwnerIsBounded(t *testing.T) {
	srv := pgtest.Private(t)
	dsn := privateSchema(t, srv, "orphan")
	p := openInternal(t, dsn, Options{Timeout: boundTimeout})
	killStandby(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*answerWithin)
	defer cancel()
	orphan, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	key := "idem:orphan"
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(pgLockKey, dbKey(key))
	b.Queue(pgSaveResponse, dbKey(key), []byte{1}, 201, "", []byte("done"), time.Hour.Milliseconds(), []byte{})
	b.Queue("COMMIT")
	_ = orphan.SendBatch(ctx, b) // never read: the process dies while its COMMIT waits
	waitWithin(t, answerWithin, "the owner's COMMIT waits for the standby", func() bool { return inSyncRep(t, srv) > 0 })
	orphan.PgConn().Conn().Close() // kill -9: the socket closes, and no cancel is sent

	start := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, answerWithin+5*time.Second) // a request's with no MaxWait
	defer rcancel()
	r, err := p.Reserve(rctx, key)
	took := time.Since(start)
	if r != nil {
		r.Release()
	}
	if !errors.Is(err, store.ErrKeyHeld) {
		t.Errorf("the retry's Reserve behind an orphaned owner: got %v after %s, want store.ErrKeyHeld", err, took)
	}
	if took > answerWithin {
		t.Errorf("the retry's Reserve waited %s, want an answer within about Options.Timeout (%s)", took, p.opt.Timeout)
	}
}

// An instance restarted during a synchronous standby's outage, with
// nothing to migrate and its rate policy unchanged, must open at once: at
// SurvivesProcessCrash it can count hits, and Open, which waits for the
// standby only if it has something to commit, must not keep it from
// starting.
func TestOpenWithNothingToChangeCommitsNothing(t *testing.T) {
	srv := pgtest.Private(t)
	dsn := privateSchema(t, srv, "reopen")
	opt := Options{Options: store.Options{Durability: store.SurvivesProcessCrash}, Timeout: boundTimeout}
	pol := driver.Policy{Name: "api", Limit: 100, Window: time.Minute}
	first := openInternal(t, dsn, opt)
	if _, err := first.ClaimPolicy(context.Background(), pol); err != nil {
		t.Fatalf("ClaimPolicy: %v", err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	killStandby(t, srv)

	// Each under a context of its own: a commit waiting for the standby
	// would hold it to its end (the COMMIT then comes back as a success,
	// committed on the primary alone, once the context's cancel lands).
	within := func(what string, f func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if err != nil || ctx.Err() != nil {
			t.Fatalf("%s with nothing to change and the standby dead: got %v after %s, want nil at once (no commit)", what, err, time.Since(start))
		}
	}
	var p *Store
	within("Open", func(ctx context.Context) (err error) {
		p, err = Open(ctx, dsn, opt)
		return err
	})
	defer p.Close(context.Background())
	within("ClaimPolicy of an unchanged policy", func(ctx context.Context) error {
		_, err := p.ClaimPolicy(ctx, pol)
		return err
	})
	if err := hitWithin(t, p, "rate:reopened", fixed(100, time.Minute)); err != nil {
		t.Errorf("a hit at SurvivesProcessCrash after the reopen: %v", err)
	}
}

// A Reserve that must connect to a server the network has stopped
// answering (packets dropped, cancel requests too) is bounded as well:
// it fails as a late commit does, within Options.Timeout and cancelGrace,
// rather than waiting as long as its request's context.
func TestReserveThroughACutNetworkIsBounded(t *testing.T) {
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cut atomic.Bool
	var wg sync.WaitGroup
	held := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		close(held)
		for c := range held {
			c.Close()
		}
		wg.Wait()
	})
	wg.Go(func() { // relays connections made before the cut; holds, silent, those after
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if cut.Load() {
				held <- c
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { io.Copy(s, c); s.Close() }) //nolint:errcheck // a relay
			wg.Go(func() { io.Copy(c, s); c.Close() }) //nolint:errcheck // a relay
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	p := openInternal(t, u.String(), Options{Timeout: boundTimeout})
	cut.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 3*answerWithin) // a request's with no MaxWait
	defer cancel()
	start := time.Now()
	r, err := p.Reserve(ctx, "idem:cut")
	took := time.Since(start)
	if r != nil {
		r.Release()
	}
	if !errors.Is(err, errLate) {
		t.Errorf("Reserve through a cut network: got %v, want the late error", err)
	}
	if took > answerWithin {
		t.Errorf("Reserve through a cut network took %s, want about Options.Timeout and cancelGrace (%s)", took, p.opt.Timeout+cancelGrace)
	}
}
