package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// The store's warnings go to Options.Logger, not to slog's default.
func TestPostgresWarnsThroughOptionsLogger(t *testing.T) {
	var buf bytes.Buffer // written by ClaimPolicy, on this goroutine
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{Options: store.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))}})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	defer s.Close(context.Background())
	release, err := s.ClaimPolicy(ctx, driver.Policy{Name: "logged", Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	release()
	release, err = s.ClaimPolicy(ctx, driver.Policy{Name: "logged", Limit: 3, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got := buf.String(); !strings.Contains(got, "rate policy changed") {
		t.Errorf("got log %q, want the policy change warned through Options.Logger", got)
	}
}
