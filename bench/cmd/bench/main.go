// Command bench is porch's load harness (`just bench`). It starts each
// benchserver mode on 127.0.0.1:0, drives it with wrk at a fixed number of
// connections for a bounded time, and prints one Markdown table of
// requests/s, p50 and p99 latency, the ratio to go-chi/httprate and, for
// porch rows, the mean commit batch; then the memory of the porch SQLite
// server before and after 100k and 1M distinct client keys and after their
// windows expired; then the targets, met or missed.
//
// It installs nothing: wrk must be on PATH (`just bench` installs the Debian
// package when it is missing). Run it from the bench module:
//
//	cd bench && go run ./cmd/bench -duration 5s
//
// Every load goes to loopback only and stops by itself: each wrk run has a
// duration, and the memory runs send a fixed number of requests.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// config is the command line.
type config struct {
	server      string
	duration    time.Duration
	warmup      time.Duration
	reps        int
	conns       []int // wrk connections; each count runs every selected row
	threads     int
	keyspace    int
	replayKeys  int
	only        []string
	memKeys     []int
	memWindow   time.Duration
	profile     string
	profileOut  string
	profileTop  int
	postgresDSN string
}

func parseFlags(args []string) (config, error) {
	var c config
	var only, memKeys, conns string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.server, "server", "", "benchserver binary (if empty, built from this module into a temporary directory)")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "length of each measured wrk run")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "length of the unmeasured wrk run before each row")
	fs.IntVar(&c.reps, "reps", 3, "measured runs per row; the table shows their median")
	fs.StringVar(&conns, "c", "64", "wrk connections, or a comma-separated list of counts (e.g. 1,2,16,64), each running every selected row and printing its own tables")
	fs.IntVar(&c.threads, "t", 2, "wrk threads (at most the connections: -c 1 runs -t1)")
	fs.IntVar(&c.keyspace, "keyspace", 131072, "distinct client addresses in many-keys rows (at most 131072)")
	fs.IntVar(&c.replayKeys, "replay-keys", 16, "size of the fixed key set replays cycle through")
	fs.StringVar(&only, "rows", "", "comma-separated row ids or path.Match patterns to run (e.g. httprate/one,porch-sqlite/many, or 'httprate/*,porch-sqlite*/*' for the SQLite limiter's rows of every algorithm and their baseline); empty runs all; \"none\" runs no row")
	fs.StringVar(&memKeys, "mem-keys", "100000,1000000", "distinct client keys for the memory runs, comma-separated; empty skips them")
	fs.DurationVar(&c.memWindow, "mem-window", 10*time.Minute, "limiter window in the memory runs (expired by moving the server's clock)")
	fs.StringVar(&c.profile, "profile", "", "row id to CPU-profile under load after the table (e.g. porch-sqlite/many)")
	fs.StringVar(&c.profileOut, "profile-out", "", "where to write the profile (if empty, cpu-<row>.pprof in the temporary directory, kept)")
	fs.IntVar(&c.profileTop, "profile-top", 25, "lines of `go tool pprof -top` to print")
	fs.StringVar(&c.postgresDSN, "postgres", "", "PostgreSQL DSN for porch-postgres rows (if empty, the server's default)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if only != "" {
		c.only = strings.Split(only, ",")
		for _, p := range c.only {
			if _, err := path.Match(p, ""); err != nil {
				return c, fmt.Errorf("-rows: %q: %w", p, err)
			}
		}
	}
	for _, s := range strings.Split(conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-c: %q is not a positive connection count", s)
		}
		c.conns = append(c.conns, n)
	}
	for _, s := range strings.Split(memKeys, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<22 {
			return c, fmt.Errorf("-mem-keys: %q is not a count between 1 and %d", s, 1<<22)
		}
		c.memKeys = append(c.memKeys, n)
	}
	switch {
	case c.duration < time.Second || c.warmup < 0:
		return c, fmt.Errorf("-duration must be at least 1s and -warmup not negative")
	case c.reps < 1 || c.threads < 1:
		return c, fmt.Errorf("-reps and -t must be positive")
	case c.keyspace < 1 || c.keyspace > 131072:
		return c, fmt.Errorf("-keyspace must be between 1 and 131072")
	case c.replayKeys < 1:
		return c, fmt.Errorf("-replay-keys must be positive")
	case c.memWindow < time.Second:
		return c, fmt.Errorf("-mem-window must be at least 1s")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is not installed (apt-get install wrk; `just bench` does it): %w", err)
	}
	dir, err := os.MkdirTemp("", "porch-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.server == "" {
		cfg.server = filepath.Join(dir, "benchserver")
		fmt.Fprintln(os.Stderr, "bench: building benchserver")
		build := exec.Command("go", "build", "-o", cfg.server, "github.com/writeonce/porch-go/bench/cmd/benchserver")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build benchserver (run from the bench module): %w", err)
		}
	}
	if err := writeScripts(dir); err != nil {
		return err
	}
	h := &harness{cfg: cfg, dir: dir, byConns: map[int]map[string]rowResult{}, loadStart: loadAvg()}
	defer h.stopAOF()
	start := time.Now()
	printPreamble(cfg)

	for _, c := range cfg.conns {
		h.at(c)
		for _, r := range rows(cfg.replayKeys) {
			if !h.selected(r.id()) {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: %s at %d connections (%s elapsed)\n", r.id(), c, time.Since(start).Round(time.Second))
			h.results[r.id()] = h.measure(r)
		}
	}
	for _, c := range cfg.conns {
		h.at(c)
		if len(h.results) == 0 {
			continue
		}
		if len(cfg.conns) > 1 {
			fmt.Printf("\n### %d connections (`wrk -t%d -c%d`)\n", c, h.threads(), c)
		}
		printTable(h)
		printFloors(h)
		printNaive(h)
	}
	printNaiveByConns(h)
	h.at(h.mainConns())
	if len(h.results) > 0 {
		printExact(h)
	}
	var mem []memResult
	for _, n := range cfg.memKeys {
		fmt.Fprintf(os.Stderr, "bench: memory, %d keys (%s elapsed)\n", n, time.Since(start).Round(time.Second))
		mem = append(mem, h.memory(n))
	}
	if len(mem) > 0 {
		printMemory(mem, cfg)
	}
	printTargets(h, mem)
	if cfg.profile != "" {
		if err := h.profileRow(cfg.profile); err != nil {
			return err
		}
	}
	fmt.Printf("\nTotal time %s. Load average at the start %s, at the end %s (other work on the machine skews a run).\n",
		time.Since(start).Round(time.Second), h.loadStart, loadAvg())
	return nil
}

// printPreamble says what ran, where and when.
func printPreamble(cfg config) {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if out, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(out) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	fmt.Printf("Measured %s at commit %s on %d CPUs (%s), Go %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), commit, runtime.NumCPU(), cpuModel(), runtime.Version())
	load := make([]string, len(cfg.conns))
	for i, c := range cfg.conns {
		load[i] = fmt.Sprintf("`wrk -t%d -c%d -d%s --latency`", min(cfg.threads, c), c, cfg.duration)
	}
	fmt.Printf("Load: %s on loopback, %d measured runs per row after a %s warm-up; medians shown.\n",
		strings.Join(load, ", then "), cfg.reps, cfg.warmup)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// harness holds a run's configuration and results.
type harness struct {
	cfg       config
	dir       string
	conns     int                          // the wrk connections of the rows being run or printed (at)
	results   map[string]rowResult         // by row id, at conns
	byConns   map[int]map[string]rowResult // results by connection count
	loadStart string                       // /proc/loadavg when the run began

	aofOnce sync.Once // starts aof for the porch-redis-aof rows
	aof     *exec.Cmd // redis-server with appendfsync always, or nil
	aofAddr string
	aofErr  error
}

// at makes c connections the count that rows are run at, and that the
// tables print the results of.
func (h *harness) at(c int) {
	h.conns = c
	if h.byConns[c] == nil {
		h.byConns[c] = map[string]rowResult{}
	}
	h.results = h.byConns[c]
}

// threads is wrk's threads at the current count: -t, at most one a
// connection.
func (h *harness) threads() int { return min(h.cfg.threads, h.conns) }

// mainConns is the count whose results the targets, the
// exactness bursts and -profile use: 64 if it ran, else the first.
func (h *harness) mainConns() int {
	if slices.Contains(h.cfg.conns, 64) {
		return 64
	}
	return h.cfg.conns[0]
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// selected reports whether -rows names id, exactly or by a pattern.
func (h *harness) selected(id string) bool {
	return len(h.cfg.only) == 0 || slices.ContainsFunc(h.cfg.only, func(p string) bool {
		ok, _ := path.Match(p, id)
		return ok
	})
}
