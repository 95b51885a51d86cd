package main

import (
	"slices"
	"testing"
)

// -c takes one count or a list, each a run of every selected row.
func TestParseFlagsConns(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []int
		err  bool
	}{
		{"default", nil, []int{64}, false},
		{"one count", []string{"-c", "16"}, []int{16}, false},
		{"a list", []string{"-c", "1,2, 16,64"}, []int{1, 2, 16, 64}, false},
		{"zero", []string{"-c", "1,0"}, nil, true},
		{"not a number", []string{"-c", "many"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args)
			if (err != nil) != tc.err {
				t.Fatalf("parseFlags(%q): error %v, want an error: %v", tc.args, err, tc.err)
			}
			if err == nil && !slices.Equal(cfg.conns, tc.want) {
				t.Fatalf("parseFlags(%q): conns %v, want %v", tc.args, cfg.conns, tc.want)
			}
		})
	}
}

// wrk runs at most one thread a connection: -t2 with -c 1 runs -t1.
func TestThreadsAtMostConns(t *testing.T) {
	h := &harness{cfg: config{threads: 2}, byConns: map[int]map[string]rowResult{}}
	for c, want := range map[int]int{1: 1, 2: 2, 64: 2} {
		h.at(c)
		if got := h.threads(); got != want {
			t.Errorf("threads at %d connections: %d, want %d", c, got, want)
		}
	}
}
