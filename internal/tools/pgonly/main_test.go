package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// The program's own run, under go test: CI also builds it with
// CGO_ENABLED=0 and runs the binary (.ci/run).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, pgtest.DSN(t), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "stopped; state flushed") {
		t.Errorf("got output\n%s\nwant it to end with the flush", out.String())
	}
}

// Without PORCH_TEST_POSTGRES, pgonly tries the local server the tests try
// rather than refusing to start.
func TestDefaultDSN(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == "PORCH_TEST_POSTGRES" {
				return v
			}
			return ""
		}
	}
	if got, want := defaultDSN(env("")), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"; got != want {
		t.Errorf("unset: got %q, want %q", got, want)
	}
	if got, want := defaultDSN(env("postgres://ci/porch")), "postgres://ci/porch"; got != want {
		t.Errorf("set: got %q, want %q", got, want)
	}
}
