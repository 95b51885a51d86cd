package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writeonce/porch-go/internal/pgschema"
)

// The pgbench rows are PostgreSQL's own rate for what a durable verdict
// on one key must do at the least: one single-row upsert a transaction,
// committed, with as many clients as the harness has connections, from
// pgbench on the same loopback. The porch PostgreSQL rows of one key are
// read against them (printFloors).

// pgbenchScript is the one-row upsert each pgbench transaction runs.
const pgbenchScript = `INSERT INTO upsert_bench VALUES (1, 1) ON CONFLICT (k) DO UPDATE SET n = upsert_bench.n + 1;
`

// defaultPostgres is benchserver's default DSN, for when neither
// -postgres nor PORCH_TEST_POSTGRES says.
const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// pgDSN is the DSN the PostgreSQL rows use.
func (h *harness) pgDSN() string {
	if h.cfg.postgresDSN != "" {
		return h.cfg.postgresDSN
	}
	if v := os.Getenv("PORCH_TEST_POSTGRES"); v != "" {
		return v
	}
	return defaultPostgres
}

var (
	rePgbenchTPS   = regexp.MustCompile(`(?m)^tps = ([\d.]+)`)
	rePgbenchTx    = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	rePgbenchFails = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
)

// measurePgbench runs pgbench for r as measure runs wrk for a server row:
// a warm-up, then the measured runs, their medians. The table's latencies
// are the transactions' own, from pgbench's per-transaction log.
func (h *harness) measurePgbench(r row) rowResult {
	res := rowResult{row: r}
	if _, err := exec.LookPath("pgbench"); err != nil {
		res.err = fmt.Errorf("pgbench is not installed (apt-get install postgresql-client): %w", err)
		return res
	}
	ctx := context.Background()
	dsn := h.pgDSN()
	schemaDSN, drop, err := pgschema.Fresh(ctx, dsn, "porch_bench_")
	if err != nil {
		res.err = err
		return res
	}
	defer drop(ctx) //nolint:errcheck // a leftover schema holds one row
	schema, err := searchPath(schemaDSN)
	if err != nil {
		res.err = err
		return res
	}
	if err := pgschema.Exec(ctx, schemaDSN, `CREATE TABLE upsert_bench (k int PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		res.err = err
		return res
	}
	script := filepath.Join(h.dir, "upsert.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		res.err = err
		return res
	}
	opts := "-c search_path=" + schema
	if r.crash {
		opts += " -c synchronous_commit=off"
	}
	run := func(d time.Duration, logDir string) (pgbenchResult, error) {
		return runPgbench(dsn, opts, script, h.conns, d, logDir)
	}
	if h.cfg.warmup > 0 {
		if _, err := run(h.cfg.warmup, ""); err != nil {
			res.err = err
			return res
		}
	}
	var runs []wrkResult
	for range h.cfg.reps {
		logDir, err := os.MkdirTemp(h.dir, "pgbench-log-")
		if err != nil {
			res.err = err
			return res
		}
		p, err := run(h.cfg.duration, logDir)
		os.RemoveAll(logDir)
		if err != nil {
			res.err = err
			return res
		}
		runs = append(runs, p.wrkResult)
		res.errors += p.non2xx
	}
	res.rps = median(runs, func(w wrkResult) float64 { return w.rps })
	res.min = slices.MinFunc(runs, func(a, b wrkResult) int { return cmpFloat(a.rps, b.rps) }).rps
	res.max = slices.MaxFunc(runs, func(a, b wrkResult) int { return cmpFloat(a.rps, b.rps) }).rps
	res.p50 = time.Duration(median(runs, func(w wrkResult) float64 { return float64(w.p50) }))
	res.p99 = time.Duration(median(runs, func(w wrkResult) float64 { return float64(w.p99) }))
	return res
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pgbenchResult is one pgbench run in wrk's terms: tps as rps, failed
// transactions as non-2xx.
type pgbenchResult struct{ wrkResult }

// runPgbench runs `pgbench -n -M prepared -c N -j N -T D -f script` with
// PGOPTIONS opts, and with logDir its per-transaction log there, from
// which the latencies are read.
func runPgbench(dsn, opts, script string, clients int, d time.Duration, logDir string) (pgbenchResult, error) {
	var p pgbenchResult
	secs := strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second)))
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients), "-T", secs, "-f", script}
	if logDir != "" {
		args = append(args, "-l", "--log-prefix", filepath.Join(logDir, "tx"))
	}
	cmd := exec.Command("pgbench", append(args, dsn)...)
	cmd.Env = append(os.Environ(), "PGOPTIONS="+opts)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return p, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := rePgbenchTPS.FindSubmatch(out)
	if m == nil {
		return p, fmt.Errorf("pgbench: no tps in its output:\n%s", out)
	}
	p.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := rePgbenchTx.FindSubmatch(out); m != nil {
		p.requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := rePgbenchFails.FindSubmatch(out); m != nil {
		p.non2xx, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if logDir == "" {
		return p, nil
	}
	lat, err := pgbenchLatencies(logDir)
	if err != nil {
		return p, err
	}
	p.p50, p.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return p, nil
}

// pgbenchLatencies reads every transaction's latency from the logs pgbench
// -l wrote in dir, one file per thread: "client tx latency_us script
// epoch_s epoch_us" a line.
func pgbenchLatencies(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "tx.*"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("pgbench: no transaction log in %s (%v)", dir, err)
	}
	var lat []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue // "failed" or "skipped" instead of a latency
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("pgbench: no transaction in the logs of %s", dir)
	}
	slices.Sort(lat)
	return lat, nil
}

// percentile is the q-th quantile of sorted, by the nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// searchPath is the schema pgschema.Fresh put on schemaDSN's search_path,
// for PGOPTIONS: libpq takes no search_path in a DSN.
func searchPath(schemaDSN string) (string, error) {
	for _, f := range strings.FieldsFunc(schemaDSN, func(r rune) bool { return r == '?' || r == '&' || r == ' ' }) {
		if v, ok := strings.CutPrefix(f, "search_path="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no search_path in %q", schemaDSN)
}
