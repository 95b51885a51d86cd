package main

import (
	"context"
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

// -redis-replicas reaches the store: a server with no replica online is
// refused at start-up, naming the shortfall, rather than served with
// counts a failover would forget.
func TestRedisReplicasReachTheStore(t *testing.T) {
	srv := redistest.StartServer(t)
	args := []string{"-db", filepath.Join(t.TempDir(), "sf.db"), "-redis", "redis://" + srv.Addr, "-redis-replicas", "1"}
	cfg, err := parseFlags(args)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	app, err := newShop(cfg, nil)
	if err == nil {
		app.Close(context.Background())
		t.Fatalf("newShop(%q) on a server without replicas: opened, want an error", args)
	}
	if !strings.Contains(err.Error(), "0 online replicas") {
		t.Errorf("newShop(%q): %v, want it to name 0 online replicas", args, err)
	}
}
