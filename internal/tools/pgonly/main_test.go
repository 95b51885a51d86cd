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
