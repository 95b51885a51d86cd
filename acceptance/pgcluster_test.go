//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// pgCluster is a PostgreSQL primary and a hot standby the gate starts for
// itself (initdb, pg_basebackup -R) in a temporary directory, on loopback
// ports of their own, so that a leg can kill the primary and promote the
// standby without touching the server other legs share. The standby
// streams through a pgProxy, so a leg can cut replication while the
// primary lives. Create it with startPGCluster; the test's cleanup kills
// both servers and removes their files.
type pgCluster struct {
	progs *pgtest.Programs // initdb, postgres and pg_basebackup, and the temporary directory holding both data directories and their sockets

	primary, standby *pgtest.Postmaster
	link             *pgProxy // the standby's replication connection to the primary
}

// startPGCluster initializes a primary, takes a base backup of it through a
// relay and starts the standby on it, and returns once the standby streams.
// With sync the primary names every standby synchronous
// (synchronous_standby_names = '*'): a commit is answered only once the
// standby has flushed its WAL. Without it the standby is asynchronous.
//
// initdb and postgres refuse to run as root, so when the gate does (as CI
// does) every server program runs as the postgres OS user (see
// pgtest.Programs).
func startPGCluster(t *testing.T, sync bool) *pgCluster {
	t.Helper()
	c := &pgCluster{progs: pgtest.NewPrograms(t, "porch-pgha-")}

	primary := filepath.Join(c.progs.Base, "primary")
	c.progs.Run(t, "initdb", "--no-sync", "--auth=trust", "--username=postgres", "--pgdata="+primary)
	// initdb's pg_hba.conf already trusts replication from 127.0.0.1.
	conf := []string{"wal_level = replica", "max_wal_senders = 4"}
	if sync {
		conf = append(conf, "synchronous_standby_names = '*'")
	}
	c.progs.AppendConf(t, primary, conf...)
	c.primary = c.progs.Start(t, "primary", primary)
	c.waitAccepts(t, c.primary)

	c.link, _ = startPGProxy(t, c.primary.DSN())
	_, linkPort, _ := net.SplitHostPort(c.link.ln.Addr().String())
	standby := filepath.Join(c.progs.Base, "standby")
	// -R writes primary_conninfo (through the relay) and standby.signal; the
	// primary's postgresql.conf, synchronous_standby_names included, comes
	// along as a real base backup's would.
	c.progs.Run(t, "pg_basebackup", "--no-sync", "--checkpoint=fast", "--wal-method=stream", "--write-recovery-conf",
		"--host=127.0.0.1", "--port="+linkPort, "--username=postgres", "--pgdata="+standby)
	c.standby = c.progs.Start(t, "standby", standby)
	c.waitAccepts(t, c.standby)
	state := "async"
	if sync {
		state = "sync"
	}
	waitFor(t, 30*time.Second, "the standby streams from the primary as "+state, func() bool {
		var n int
		c.query(t, c.primary, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, []any{state}, &n)
		return n == 1
	})
	return c
}

// waitAccepts polls until s takes a connection (a standby once it is
// consistent enough for hot standby queries).
func (c *pgCluster) waitAccepts(t *testing.T, s *pgtest.Postmaster) {
	t.Helper()
	waitFor(t, 30*time.Second, s.Name+" postgres accepts connections", func() bool {
		select {
		case <-s.Exited():
			t.Fatalf("%s postgres exited: %s\n%s", s.Name, s.ExitState(), s.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.DSN())
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	})
}

// query runs one statement on s alone and scans its single row into dest.
func (c *pgCluster) query(t *testing.T, s *pgtest.Postmaster, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatalf("connect to %s: %v", s.Name, err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %s: %v", s.Name, sql, err)
		}
		return
	}
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %s: %v", s.Name, sql, err)
	}
}

// multiHostDSN lists the primary, then the standby, and asks for the one
// that takes writes: pgx tries them in order and skips a server that is
// down or read-only, so a pool finds the promoted standby by itself.
func (c *pgCluster) multiHostDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&pool_max_conns=8",
		c.primary.Port, c.standby.Port)
}

// caughtUp polls until the standby has replayed everything the primary has
// written so far.
func (c *pgCluster) caughtUp(t *testing.T) {
	t.Helper()
	var lsn string
	c.query(t, c.primary, `SELECT pg_current_wal_lsn()::text`, nil, &lsn)
	waitFor(t, 30*time.Second, "the standby replays the primary's WAL up to "+lsn, func() bool {
		var ok bool
		c.query(t, c.standby, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, []any{lsn}, &ok)
		return ok
	})
}

// failOver does what an HA manager does once the primary is gone: it clears
// synchronous_standby_names on the standby (no standby is left to confirm
// a commit, so with it set every write on the promoted server would wait
// forever), then promotes it and waits until it takes writes.
func (c *pgCluster) failOver(t *testing.T) {
	t.Helper()
	c.query(t, c.standby, `ALTER SYSTEM SET synchronous_standby_names = ''`, nil)
	c.query(t, c.standby, `SELECT pg_reload_conf()`, nil)
	var promoted bool
	c.query(t, c.standby, `SELECT pg_promote(true, 30)`, nil, &promoted)
	if !promoted {
		t.Fatalf("pg_promote: the standby was not promoted within 30s")
	}
}
