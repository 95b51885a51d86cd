package main

import (
	"context"
	"path/filepath"
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
