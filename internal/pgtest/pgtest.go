// Package pgtest gives tests a real PostgreSQL to talk to, in a schema of
// their own.
//
// The server is, in order: the DSN in PORCH_TEST_POSTGRES (CI sets it to the
// machine's service); else a local server at LocalDSN, when one answers
// within LocalTimeout; else a disposable postgres container started with
// ory/dockertest when a Docker engine answers; else the test is skipped with
// a one-line reason that names PORCH_TEST_POSTGRES. Set
// PORCH_REQUIRE_POSTGRES=1 to turn that skip into a failure, as CI does, so a
// missing server cannot pass silently.
//
// A test that must change a server's configuration or life starts one of
// its own: Private for a single server, Programs for what Private is made
// of (initdb, postgresql.conf, a postmaster on a free port), which the
// acceptance gate's primary and standby share.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"

	"github.com/writeonce/porch-go/internal/pgschema"
)

const (
	// EnvDSN names the variable holding the server's DSN.
	EnvDSN = "PORCH_TEST_POSTGRES"
	// EnvRequire names the variable that turns a missing server into a
	// failure instead of a skip.
	EnvRequire = "PORCH_REQUIRE_POSTGRES"
	// LocalDSN is the server a developer's machine (and CI) conventionally
	// runs: tried when EnvDSN is unset, so that a plain go test ./... runs
	// the PostgreSQL tests wherever one is listening instead of skipping
	// them unnoticed.
	LocalDSN = pgschema.LocalDSN
	// LocalTimeout bounds the try of LocalDSN: short, since most machines
	// without a server refuse at once, and a filtered port must not stall
	// every run by the full connect timeout before dockertest is tried.
	LocalTimeout = 2 * time.Second
)

var (
	serverOnce sync.Once
	serverDSN  string
	serverErr  error
)

// DSN returns a DSN whose search_path is a fresh, empty schema, dropped when
// tb ends. Every table a test creates through it lives in that schema, so
// tests do not see each other's rows.
func DSN(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverDSN, serverErr = server() })
	if serverErr != nil {
		unavailable(tb, serverErr, os.Getenv(EnvRequire) != "")
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dsn, drop, err := pgschema.Fresh(ctx, serverDSN, "porch_test_")
	if err != nil {
		tb.Fatalf("%s: %v", EnvDSN, err)
	}
	tb.Cleanup(func() {
		if err := drop(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return dsn
}

// WithParam returns dsn with the connection parameter key set to value
// (search_path, application_name, pool_max_conns), in URL or keyword/value
// form as dsn is written.
func WithParam(dsn, key, value string) string { return pgschema.WithParam(dsn, key, value) }

// unavailable fails tb when a server is required, else skips it. The
// reason (from finder.find) names EnvDSN, the one variable that runs the
// test, since the skip is all a reader of go test -v sees.
func unavailable(tb testing.TB, err error, required bool) {
	tb.Helper()
	if required {
		tb.Fatalf("postgres required (%s is set) but unavailable: %v", EnvRequire, err)
		return
	}
	tb.Skipf("no postgres: %v", err)
}

// server finds or starts a PostgreSQL server and returns its DSN.
func server() (string, error) {
	return finder{getenv: os.Getenv, ping: ping, container: container}.find()
}

// finder is the order in which server looks for a PostgreSQL, with what it
// touches injected so that the order is testable without a server.
type finder struct {
	getenv    func(string) string
	ping      func(ctx context.Context, dsn string) error
	container func() (string, error)
}

// find returns the first server that answers, in the package's order. A
// set EnvDSN that does not answer is an error, not a fall-through: the
// user named that server, and testing another would hide the mistake.
func (f finder) find() (string, error) {
	if dsn := f.getenv(EnvDSN); dsn != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.ping(ctx, dsn); err != nil {
			return "", fmt.Errorf("%s is set but does not answer: %w", EnvDSN, err)
		}
		return dsn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), LocalTimeout)
	defer cancel()
	localErr := f.ping(ctx, LocalDSN)
	if localErr == nil {
		return LocalDSN, nil
	}
	dsn, err := f.container()
	if err != nil {
		return "", fmt.Errorf("set %s to a server's DSN to run these tests (none at %s: %v; %v)",
			EnvDSN, LocalDSN, localErr, err)
	}
	return dsn, nil
}

// ping connects to dsn once.
func ping(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// container starts a disposable postgres container and returns its DSN.
func container() (string, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	if err := pool.Client.Ping(); err != nil {
		return "", fmt.Errorf("no Docker engine answers: %w", err)
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: "postgres", Tag: "16",
		Env: []string{"POSTGRES_HOST_AUTH_METHOD=trust", "POSTGRES_DB=test"},
	}, func(hc *docker.HostConfig) { hc.AutoRemove = true })
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	res.Expire(600) // the container outlives no test run by more than this
	dsn := fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", res.GetHostPort("5432/tcp"))
	pool.MaxWait = 60 * time.Second
	err = pool.Retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return ping(ctx, dsn)
	})
	if err != nil {
		return "", fmt.Errorf("postgres container did not come up: %w", err)
	}
	return dsn, nil
}
