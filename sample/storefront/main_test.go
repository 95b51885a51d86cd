package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// The rate algorithm's flags as the limiter gets them.
func TestParseFlagsRateAlgorithm(t *testing.T) {
	tests := []struct {
		args  []string
		alg   rate.Algorithm
		burst int
		lease int
	}{
		{nil, rate.FixedWindow, 0, 0},
		{[]string{"-rate-algorithm", "fixed"}, rate.FixedWindow, 0, 0},
		{[]string{"-rate-algorithm", "sliding"}, rate.SlidingWindow, 0, 0},
		{[]string{"-rate-algorithm=gcra"}, rate.GCRA, 0, 0},
		{[]string{"-rate-algorithm", "gcra", "-rate-burst", "0"}, rate.GCRA, 0, 0},
		{[]string{"-rate-burst", "7", "-rate-algorithm", "gcra"}, rate.GCRA, 7, 0},
		// -rate-lease on each shared store, with fixed and sliding.
		{[]string{"-postgres", testDSN, "-rate-lease", "16"}, rate.FixedWindow, 0, 16},
		{[]string{"-rate-lease=1", "-redis", "redis://127.0.0.1:6379/0", "-rate-algorithm", "sliding"}, rate.SlidingWindow, 0, 1},
		{[]string{"-redis-cluster", "127.0.0.1:7000", "-rate-lease", "8"}, rate.FixedWindow, 0, 8},
		{[]string{"-postgres", testDSN, "-redis", "redis://127.0.0.1:6379/0", "-rate-lease", "4"}, rate.FixedWindow, 0, 4},
		{[]string{"-postgres", testDSN, "-rate-lease", "1099511627776"}, rate.FixedWindow, 0, rate.MaxLimit},
		// -rate-lease 0 is off, the default, wherever it is given.
		{[]string{"-rate-lease", "0"}, rate.FixedWindow, 0, 0},
		{[]string{"-rate-algorithm", "gcra", "-rate-lease=0"}, rate.GCRA, 0, 0},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tt.args, err)
			continue
		}
		if c.rateAlgorithm != tt.alg || c.rateBurst != tt.burst || c.rateLease != tt.lease {
			t.Errorf("parseFlags(%q): got %s burst %d lease %d, want %s burst %d lease %d",
				tt.args, c.rateAlgorithm, c.rateBurst, c.rateLease, tt.alg, tt.burst, tt.lease)
		}
	}
}

// testDSN is a -postgres DSN for command lines parsed, never dialled: a
// refused one exits before connecting.
const testDSN = "postgres://porch@127.0.0.1:1/none?sslmode=disable"

// flagErrors are command lines the storefront refuses at start-up, each
// with the one line it must print.
var flagErrors = []struct {
	args []string
	want string
}{
	{[]string{"-rate-algorithm", "token-bucket"}, `-rate-algorithm must be fixed, sliding or gcra, got "token-bucket"`},
	{[]string{"-rate-algorithm", "GCRA"}, `-rate-algorithm must be fixed, sliding or gcra, got "GCRA"`},
	{[]string{"-rate-algorithm", ""}, `-rate-algorithm must be fixed, sliding or gcra, got ""`},
	{[]string{"-rate-burst", "5"}, `-rate-burst is for -rate-algorithm gcra only, got -rate-burst 5 with fixed`},
	{[]string{"-rate-burst", "0"}, `-rate-burst is for -rate-algorithm gcra only, got -rate-burst 0 with fixed`},
	{[]string{"-rate-algorithm", "sliding", "-rate-burst", "5"}, `-rate-burst is for -rate-algorithm gcra only, got -rate-burst 5 with sliding`},
	{[]string{"-rate-algorithm", "fixed", "-rate-burst=0"}, `-rate-burst is for -rate-algorithm gcra only, got -rate-burst 0 with fixed`},
	{[]string{"-rate-algorithm", "gcra", "-rate-burst", "-1"}, `-rate-burst must not be negative, got -1`},
	{[]string{"-rate-burst", "-3"}, `-rate-burst must not be negative, got -3`},
	{[]string{"-rate-limit", "0"}, `-rate-limit must be at least 1, got 0`},
	{[]string{"-inflight-limit", "-1"}, `-inflight-limit must not be negative, got -1`},
	{[]string{"-postgres", testDSN, "-inflight-limit=-3"}, `-inflight-limit must not be negative, got -3`},
	{[]string{"-no-rate-limit", "-inflight-limit", "2"}, `-inflight-limit limits the rate-limited routes, which -no-rate-limit serves without any limiter: give one`},
	{[]string{"-rate-lease", "-1"}, `-rate-lease must not be negative, got -1`},
	{[]string{"-postgres", testDSN, "-rate-lease", "-16"}, `-rate-lease must not be negative, got -16`},
	{[]string{"-postgres", testDSN, "-rate-lease", "1099511627777"}, `-rate-lease must be at most 1099511627776, got 1099511627777`},
	{[]string{"-postgres", testDSN, "-rate-algorithm", "gcra", "-rate-lease", "16"}, `-rate-lease is for -rate-algorithm fixed or sliding, got -rate-lease 16 with gcra`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-rate-algorithm", "gcra", "-rate-burst", "5", "-rate-lease", "1"}, `-rate-lease is for -rate-algorithm fixed or sliding, got -rate-lease 1 with gcra`},
	{[]string{"-rate-lease", "16"}, `-rate-lease needs -postgres, -redis, -redis-sentinel or -redis-cluster: on SQLite the limiter already counts in memory (see -rate-write-ahead)`},
	{[]string{"-rate-algorithm", "sliding", "-rate-lease=1"}, `-rate-lease needs -postgres, -redis, -redis-sentinel or -redis-cluster: on SQLite the limiter already counts in memory (see -rate-write-ahead)`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-cluster", "127.0.0.1:7000"}, redisExclusive},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-sentinel", "127.0.0.1:26379", "-redis-master", "porch"}, redisExclusive},
	{[]string{"-redis-sentinel", "127.0.0.1:26379", "-redis-master", "porch", "-redis-cluster", "127.0.0.1:7000"}, redisExclusive},
	{[]string{"-redis-sentinel", "127.0.0.1:26379"}, `-redis-sentinel needs -redis-master: the name the Sentinels monitor the primary under`},
	{[]string{"-redis-sentinel", "127.0.0.1:26379,127.0.0.1:26380", "-redis-replicas", "1"}, `-redis-sentinel needs -redis-master: the name the Sentinels monitor the primary under`},
	{[]string{"-redis-master", "porch"}, `-redis-master needs -redis-sentinel`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-master", "porch"}, `-redis-master needs -redis-sentinel`},
	{[]string{"-redis-sentinel", "127.0.0.1", "-redis-master", "porch"}, `-redis-sentinel must be host:port,host:port,…, got "127.0.0.1"`},
	{[]string{"-redis-replicas", "1"}, `-redis-replicas needs -redis, -redis-sentinel or -redis-cluster`},
	{[]string{"-redis-replicas", "0"}, `-redis-replicas needs -redis, -redis-sentinel or -redis-cluster`},
	{[]string{"-postgres", testDSN, "-redis-replicas", "2"}, `-redis-replicas needs -redis, -redis-sentinel or -redis-cluster`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-replicas", "-1"}, `-redis-replicas must not be negative, got -1`},
	{[]string{"-redis-sentinel", "127.0.0.1:26379", "-redis-master", "porch", "-redis-replicas=-2"}, `-redis-replicas must not be negative, got -2`},
	{[]string{"-redis-replicas", "-1"}, `-redis-replicas must not be negative, got -1`},
	{[]string{"-redis-require-durable"}, `-redis-require-durable needs -redis, -redis-sentinel or -redis-cluster`},
	{[]string{"-redis-prefix", "shop:"}, `-redis-prefix needs -redis, -redis-sentinel or -redis-cluster`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-prefix", "a{b}:"}, `-redis-prefix must not contain '{' or '}', got "a{b}:"`},
	{[]string{"-redis-cluster", "127.0.0.1:7000,,127.0.0.1:7001"}, `-redis-cluster must be host:port,host:port,…, got "127.0.0.1:7000,,127.0.0.1:7001"`},
	{[]string{"-redis", "http://127.0.0.1:6379"}, `-redis must be a redis:// or rediss:// URL, got "http://127.0.0.1:6379": redis: invalid URL scheme: http`},
	{[]string{"-durability", "fast"}, `-durability must be power-loss or process-crash, got "fast"`},
	{[]string{"-durability", ""}, `-durability must be power-loss or process-crash, got ""`},
	{[]string{"-postgres", testDSN, "-durability", "Power-Loss"}, `-durability must be power-loss or process-crash, got "Power-Loss"`},
	{[]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-require-durable", "-durability", "process-crash"},
		`-redis-require-durable asks that a count be on Redis's disk before its reply, -durability process-crash that it need not be: give one`},
}

// -durability as the stores get it.
func TestParseFlagsDurability(t *testing.T) {
	tests := []struct {
		args []string
		want store.Durability
	}{
		{nil, store.SurvivesPowerLoss},
		{[]string{"-durability", "power-loss"}, store.SurvivesPowerLoss},
		{[]string{"-durability=process-crash"}, store.SurvivesProcessCrash},
		{[]string{"-postgres", testDSN, "-durability", "process-crash"}, store.SurvivesProcessCrash},
		{[]string{"-redis", "redis://127.0.0.1:6379/0", "-durability", "process-crash"}, store.SurvivesProcessCrash},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tt.args, err)
			continue
		}
		if c.durability != tt.want {
			t.Errorf("parseFlags(%q): durability %d, want %d", tt.args, c.durability, tt.want)
		}
	}
}

// redisExclusive refuses more than one way to reach Redis.
const redisExclusive = `-redis, -redis-sentinel and -redis-cluster are exclusive: give one server's URL, the Sentinels' addresses or the cluster's seed nodes`

// The Redis flags as openRedis gets them.
func TestParseFlagsRedis(t *testing.T) {
	c, err := parseFlags([]string{"-redis", "rediss://u:p@cache:6380/3", "-redis-require-durable", "-redis-prefix", "shop:"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.redis.enabled() || c.redis.opt.Addr != "cache:6380" || c.redis.opt.DB != 3 || c.redis.opt.TLSConfig == nil ||
		!c.redis.requireDurable || c.redis.prefix != "shop:" {
		t.Errorf("-redis rediss://…: got %+v, opt %+v", c.redis, c.redis.opt)
	}
	c, err = parseFlags([]string{"-redis-cluster", "10.0.0.1:7000, 10.0.0.2:7000"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.redis.enabled() || c.redis.opt != nil || len(c.redis.cluster) != 2 || c.redis.cluster[1] != "10.0.0.2:7000" {
		t.Errorf("-redis-cluster: got %+v", c.redis)
	}
	c, err = parseFlags([]string{"-redis-sentinel", "10.0.0.1:26379,10.0.0.2:26379", "-redis-master", "porch", "-redis-replicas", "1"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.redis.enabled() || c.redis.opt != nil || len(c.redis.sentinels) != 2 || c.redis.sentinels[1] != "10.0.0.2:26379" ||
		c.redis.master != "porch" || c.redis.replicas != 1 {
		t.Errorf("-redis-sentinel: got %+v", c.redis)
	}
	for _, args := range [][]string{
		{"-redis", "redis://127.0.0.1:6379/0", "-redis-replicas", "2"},
		{"-redis-cluster", "127.0.0.1:7000", "-redis-replicas", "2"},
	} {
		if c, err := parseFlags(args); err != nil || c.redis.replicas != 2 {
			t.Errorf("parseFlags(%q): replicas %d, %v; want 2", args, c.redis.replicas, err)
		}
	}
	if c, _ := parseFlags(nil); c.redis.enabled() {
		t.Errorf("no Redis flag: got %+v, want Redis off", c.redis)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, tt := range flagErrors {
		_, err := parseFlags(tt.args)
		if err == nil || errors.Is(err, errFlagSyntax) || err.Error() != tt.want {
			t.Errorf("parseFlags(%q): got %v, want %q", tt.args, err, tt.want)
		}
	}
}

// mainArgsEnv carries a command line to the test binary re-run as the
// storefront (see TestStartupErrorExit2), one argument per line.
const mainArgsEnv = "STOREFRONT_TEST_MAIN_ARGS"

// Each refused command line exits 2 before anything starts, with one line
// on stderr and nothing on stdout: the storefront's main, run in a child
// process, since it calls os.Exit.
func TestStartupErrorExit2(t *testing.T) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"storefront"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0) // main returned: a refused command line would not have
	}
	for _, tt := range flagErrors {
		wantRefused(t, tt.args, tt.want)
	}
}

// -h and -help print the flags and exit 0: asking for help is not a
// mistake, and go run reports any other status as "exit status 2". A flag
// that does not exist still exits 2, naming it on the first line.
func TestHelpExit0(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		code, stdout, stderr := runMain(t, []string{arg})
		if code != 0 {
			t.Errorf("storefront %s: got exit status %d, want 0", arg, code)
		}
		if !strings.HasPrefix(stderr, "Usage of storefront:\n") || !strings.Contains(stderr, "-rate-limit") {
			t.Errorf("storefront %s: stderr got %q, want the usage with every flag", arg, stderr)
		}
		if stdout != "" {
			t.Errorf("storefront %s: stdout got %q, want nothing", arg, stdout)
		}
	}
	code, _, stderr := runMain(t, []string{"-no-such-flag"})
	if first, _, _ := strings.Cut(stderr, "\n"); code != 2 || first != "flag provided but not defined: -no-such-flag" {
		t.Errorf("storefront -no-such-flag: got exit status %d, first line %q; want 2 and the line naming the flag", code, first)
	}
}

// wantRefused runs the storefront with args in a child process (see
// TestStartupErrorExit2) and wants exit status 2, the one line
// "storefront: want" on stderr and nothing on stdout.
func wantRefused(t *testing.T, args []string, want string) {
	t.Helper()
	code, stdout, stderr := runMain(t, args)
	if code != 2 {
		t.Errorf("storefront %q: got exit status %d, want 2", args, code)
	}
	if want := "storefront: " + want + "\n"; stderr != want {
		t.Errorf("storefront %q: stderr got %q, want the one line %q", args, stderr, want)
	}
	if stdout != "" {
		t.Errorf("storefront %q: stdout got %q, want nothing", args, stdout)
	}
}

// runMain runs the storefront's main with args in a child process (see
// TestStartupErrorExit2) and returns its exit status and output.
func runMain(t *testing.T, args []string) (code int, stdout, stderr string) {
	t.Helper()
	// A deadline, not a wait: a command line wrongly accepted would
	// serve until killed.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStartupErrorExit2$")
	// -addr on port 0 and -db in a temporary directory: a command line
	// wrongly accepted must not touch anything real.
	full := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "sf.db")}, args...)
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(full, "\n"))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Run() //nolint:errcheck // the exit status is read from ProcessState
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
