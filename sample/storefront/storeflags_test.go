package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
)

// Each store gets only the options it honours, whatever else the command
// line says: -rate-write-ahead and -key-conns are accepted with every
// store, as they always were, and the shop opens on each, because
// rate.New and the drivers refuse an option they would ignore.
func TestShopOpensOnEveryStoreWithEveryFlag(t *testing.T) {
	tests := []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(t *testing.T) []string {
			return []string{"-rate-write-ahead", "16", "-key-conns", "4", "-durability", "process-crash"}
		}},
		{"postgres", func(t *testing.T) []string {
			return []string{"-postgres", pgtest.DSN(t), "-rate-write-ahead", "16", "-key-conns", "4", "-rate-lease", "8", "-durability", "process-crash"}
		}},
		{"redis", func(t *testing.T) []string {
			c := redistest.Client(t)
			return []string{"-redis", "redis://" + redistest.Addr(t), "-redis-prefix", redistest.Prefix(t, c),
				"-rate-write-ahead", "-1", "-key-conns", "4", "-rate-lease", "8", "-durability", "process-crash"}
		}},
		{"redis-sentinel", func(t *testing.T) []string {
			primary := redistest.StartServer(t)
			replica := redistest.StartReplica(t, primary)
			ss := redistest.StartSentinels(t, "porch", primary, []*redistest.Server{replica}, 1)
			return []string{"-redis-sentinel", strings.Join(ss.Addrs(), ","), "-redis-master", "porch", "-redis-replicas", "1",
				"-redis-require-durable=false", "-rate-write-ahead", "-1", "-key-conns", "4", "-rate-lease", "8"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-db", filepath.Join(t.TempDir(), "sf.db")}, tt.args(t)...)
			cfg, err := parseFlags(args)
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", args, err)
			}
			app, err := newShop(cfg, nil)
			if err != nil {
				t.Fatalf("newShop(%q): %v", args, err)
			}
			app.Close(context.Background())
		})
	}
}

// -redis-replicas reaches the store: on a server with no replica online
// (none yet, or still in its first sync) the shop starts, as it would run
// after a failover, and answers a rate-limited request and /healthz 503,
// rather than serve counts a failover would forget or refuse to start.
func TestRedisReplicasReachTheStore(t *testing.T) {
	srv := redistest.StartServer(t)
	args := []string{"-db", filepath.Join(t.TempDir(), "sf.db"), "-redis", "redis://" + srv.Addr, "-redis-replicas", "1"}
	cfg, err := parseFlags(args)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	app, err := newShop(cfg, nil)
	if err != nil {
		t.Fatalf("newShop(%q) on a server without replicas: %v, want it started, failing closed", args, err)
	}
	defer app.Close(context.Background())
	for _, path := range []string{"/products", "/healthz"} {
		w := httptest.NewRecorder()
		app.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("GET %s without replicas: %d %s (Retry-After %q), want 503 with Retry-After", path, w.Code, w.Body, w.Header().Get("Retry-After"))
		}
	}
}
