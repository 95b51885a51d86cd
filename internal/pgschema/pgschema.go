// Package pgschema gives a test or a tool a fresh, empty PostgreSQL schema
// of its own, so that runs sharing one server never see each other's rows,
// and the DSN that puts it on search_path. It needs no testing.TB, so a
// program (internal/tools/pgonly) uses it as pgtest does.
package pgschema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// LocalDSN is the server a developer's machine (and CI) conventionally
// runs: user postgres without a password, database test, on 127.0.0.1:5432.
// pgtest tries it when PORCH_TEST_POSTGRES is unset, and pgonly uses it then.
const LocalDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Fresh creates an empty schema named prefix followed by random hex on
// dsn's server. It returns a DSN whose search_path is that schema, and the
// function that drops it with everything in it.
func Fresh(ctx context.Context, dsn, prefix string) (schemaDSN string, drop func(context.Context) error, err error) {
	var b [6]byte
	rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	if err := Exec(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := Exec(ctx, dsn, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	return WithParam(dsn, "search_path", schema), drop, nil
}

// Exec runs one statement on a connection of its own.
func Exec(ctx context.Context, dsn, query string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, query)
	return err
}

// WithParam returns dsn with the connection parameter key set to value
// (search_path, application_name, pool_max_conns), in URL or keyword/value
// form as dsn is written.
func WithParam(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " " + key + "=" + value
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
