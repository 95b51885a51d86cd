// Package pgtest gives tests a real PostgreSQL to talk to, in a schema of
// their own.
//
// The server is, in order: the DSN in PORCH_TEST_POSTGRES (CI sets it to the
// machine's service); else a disposable postgres container started with
// ory/dockertest when a Docker engine answers; else the test is skipped with
// a one-line reason. Set PORCH_REQUIRE_POSTGRES=1 to turn that skip into a
// failure, as CI does, so a missing server cannot pass silently.
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

// EnvDSN names the variable holding the server's DSN.
const EnvDSN = "PORCH_TEST_POSTGRES"

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
		if os.Getenv("PORCH_REQUIRE_POSTGRES") != "" {
			tb.Fatalf("postgres required but unavailable: %v", serverErr)
		}
		tb.Skipf("no postgres: %v", serverErr)
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

// server finds or starts a PostgreSQL server and returns its DSN.
func server() (string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return "", fmt.Errorf("%s is set but does not answer: %w", EnvDSN, err)
		}
		conn.Close(ctx)
		return dsn, nil
	}
	pool, err := dockertest.NewPool("")
	if err != nil {
		return "", fmt.Errorf("%s unset and no Docker engine: %w", EnvDSN, err)
	}
	if err := pool.Client.Ping(); err != nil {
		return "", fmt.Errorf("%s unset and no Docker engine answers: %w", EnvDSN, err)
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
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		return "", fmt.Errorf("postgres container did not come up: %w", err)
	}
	return dsn, nil
}
