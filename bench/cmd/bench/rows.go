package main

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// row is one line of the table: a server mode under one kind of load.
type row struct {
	label   string // what the table calls it
	mode    string // benchserver -mode
	keys    string // one, many, or for idempotency the kind of key
	porch   bool   // report the mean commit batch
	baseTo  string // id of the row the ratio column divides by
	script  string // Lua script file name, or "" for a plain GET
	replays bool   // store the replay keys before the runs
	alg     string // benchserver -algorithm for porch limiter rows; "" is fixed
	lease   int    // benchserver -lease for porch limiter rows on a shared store
	crash   bool   // benchserver -durability process-crash (else power-loss, the default); pgbench: synchronous_commit=off
	// floorTo is the id of the row that measures what durability costs
	// for this one (the durability floor, pgbench), which printFloors
	// divides by; "" for none.
	floorTo string
	// naiveTo is the id of the hand-written limiter's row at the same
	// durability and client keys (naive-postgres), which printNaive
	// divides by; "" for none.
	naiveTo string
}

// id names the row for -rows and -profile: mode/keys, with the algorithm
// after the mode for the rows that are not a fixed window
// (porch-sqlite-gcra/many), so that the fixed rows keep their ids.
func (r row) id() string {
	if r.crash {
		return r.mode + "-crash/" + r.keys
	}
	if r.lease > 0 {
		return r.mode + "-lease/" + r.keys
	}
	if r.alg != "" {
		return r.mode + "-" + r.alg + "/" + r.keys
	}
	return r.mode + "/" + r.keys
}

// manyKeys reports whether the row sends varied X-Forwarded-For.
func (r row) manyKeys() bool { return r.keys == "many" }

func rows(replayKeys int) []row {
	var out []row
	for _, m := range []struct {
		label, mode, alg string
		porch            bool
		lease            int
		crash            bool
	}{
		{"no limiter", "none", "", false, 0, false},
		{"go-chi/httprate (memory)", "httprate", "", false, 0, false},
		{"naive SQLite, commit per request", "naive", "", false, 0, false},
		{"durability floor, SQLite (synchronous=FULL)", "floor-sqlite", "", true, 0, false},
		{"durability floor, SQLite, synchronous=NORMAL", "floor-sqlite", "", true, 0, true},
		{"porch Limiter, SQLite", "porch-sqlite", "", true, 0, false},
		{"porch Limiter, SQLite, SurvivesProcessCrash", "porch-sqlite", "", true, 0, true},
		{"porch Limiter, SQLite, sliding window", "porch-sqlite", "sliding", true, 0, false},
		{"porch Limiter, SQLite, GCRA", "porch-sqlite", "gcra", true, 0, false},
		{"porch Limiter, PostgreSQL", "porch-postgres", "", true, 0, false},
		{"porch Limiter, PostgreSQL, SurvivesProcessCrash", "porch-postgres", "", true, 0, true},
		{"porch Limiter, PostgreSQL, sliding window", "porch-postgres", "sliding", true, 0, false},
		{"porch Limiter, PostgreSQL, GCRA", "porch-postgres", "gcra", true, 0, false},
		{"porch Limiter, PostgreSQL, Lease 64", "porch-postgres", "", true, 64, false},
		{"hand-written PostgreSQL, upsert a request (pgx pool)", "naive-postgres", "", false, 0, false},
		{"hand-written PostgreSQL, upsert a request, synchronous_commit=off", "naive-postgres", "", false, 0, true},
	} {
		one := row{label: m.label, mode: m.mode, alg: m.alg, lease: m.lease, crash: m.crash, keys: "one", porch: m.porch, baseTo: "httprate/one"}
		many := row{label: m.label, mode: m.mode, alg: m.alg, lease: m.lease, crash: m.crash, keys: "many", porch: m.porch, baseTo: "httprate/many", script: "xff.lua"}
		switch {
		case m.mode == "porch-sqlite" && m.alg == "":
			one.floorTo, many.floorTo = floorRow(m.crash, "one"), floorRow(m.crash, "many")
		case m.mode == "porch-postgres" && m.alg == "" && m.lease == 0:
			one.floorTo = pgbenchRow(m.crash).id()
			one.naiveTo, many.naiveTo = naivePGRow(m.crash, "one"), naivePGRow(m.crash, "many")
		}
		out = append(out, one, many)
	}
	out = append(out, pgbenchRow(false), pgbenchRow(true))
	out = append(out, redisRows()...)
	for _, m := range []struct{ label, mode string }{
		{"porch in-flight limiter, memory", "inflight-memory"},
		{"porch in-flight limiter, SQLite", "inflight-sqlite"},
		{"porch in-flight limiter, PostgreSQL", "inflight-postgres"},
		{"porch in-flight limiter, Redis", "inflight-redis"},
	} {
		out = append(out,
			row{label: m.label, mode: m.mode, keys: "one", baseTo: "httprate/one"},
			row{label: m.label, mode: m.mode, keys: "many", baseTo: "httprate/many", script: "xff.lua"})
	}
	return append(out,
		row{label: "porch Idempotent, POST without key", mode: "porch-idem", keys: "unkeyed", porch: true, baseTo: "httprate/one", script: "post.lua"},
		row{label: "porch Idempotent, fresh key per request", mode: "porch-idem", keys: "fresh", porch: true, baseTo: "httprate/one", script: "fresh.lua"},
		row{label: fmt.Sprintf("porch Idempotent, replays of %d keys", replayKeys), mode: "porch-idem", keys: "replay", porch: true, baseTo: "httprate/one", script: "replay.lua", replays: true},
	)
}

// floorRow is the id of the durability floor's row at porch's durability
// level (crash: store.SurvivesProcessCrash, the floor's synchronous=NORMAL).
func floorRow(crash bool, keys string) string {
	return row{mode: "floor-sqlite", crash: crash, keys: keys}.id()
}

// naivePGRow is the id of the hand-written PostgreSQL limiter's row at
// porch's durability level (crash: synchronous_commit off).
func naivePGRow(crash bool, keys string) string {
	return row{mode: "naive-postgres", crash: crash, keys: keys}.id()
}

// pgbenchRow is pgbench's one-row upsert on one key, with
// synchronous_commit off if crash (what store.SurvivesProcessCrash sets
// on porch's transactions of hits).
func pgbenchRow(crash bool) row {
	label := "pgbench, one-row upsert a transaction"
	if crash {
		label += ", synchronous_commit=off"
	}
	return row{label: label, mode: "pgbench", keys: "one", crash: crash, baseTo: "httprate/one"}
}

// rowResult is a row's medians over the measured runs.
type rowResult struct {
	row       row
	err       error
	rps       float64
	p50, p99  time.Duration
	min, max  float64       // the lowest and highest req/s of the runs
	errors    int64         // non-2xx responses and socket errors, summed over the runs
	batch     float64       // mean writes per commit during the runs; 0 if none
	perCommit float64       // requests answered per commit during the runs; 0 if none
	cpuPerReq time.Duration // the server's CPU time (user + system) per request over the runs; 0 if unknown
	// redisCPUPerReq is, for a Redis row, redis-server's CPU time (INFO
	// cpu: user + system, main thread and children) per request over the
	// runs; 0 if unknown or not a Redis row. The server is shared, so
	// anything else using it meanwhile counts too.
	redisCPUPerReq time.Duration
}

// serverArgs are the benchserver flags for r.
func (h *harness) serverArgs(r row, extra ...string) []string {
	args := []string{"-mode", r.mode}
	if r.alg != "" {
		args = append(args, "-algorithm", r.alg)
	}
	if r.crash {
		args = append(args, "-durability", "process-crash")
	}
	if r.lease > 0 {
		args = append(args, "-lease", strconv.Itoa(r.lease))
	}
	if r.manyKeys() {
		args = append(args, "-trust-proxy")
	}
	if h.cfg.postgresDSN != "" {
		args = append(args, "-postgres", h.cfg.postgresDSN)
	}
	args = append(args, h.redisArgs(r)...)
	return append(args, extra...)
}

// loadFor is the wrk load for r; tag makes fresh keys unique to one run.
func (h *harness) loadFor(r row, d time.Duration, tag string) load {
	l := load{threads: h.threads(), conns: h.conns, duration: d}
	if r.script != "" {
		l.script = filepath.Join(h.dir, r.script)
	}
	switch r.script {
	case "xff.lua":
		l.args = []string{strconv.Itoa(h.cfg.keyspace)}
	case "fresh.lua":
		l.args = []string{tag}
	case "replay.lua":
		l.args = []string{replayPrefix, strconv.Itoa(h.cfg.replayKeys)}
	}
	return l
}

const replayPrefix = "replay-"

// measure starts r's server, warms it up, runs the measured runs and
// returns their medians.
func (h *harness) measure(r row) rowResult {
	if r.mode == "pgbench" {
		return h.measurePgbench(r)
	}
	res := rowResult{row: r}
	s, err := startServer(h.cfg.server, h.serverArgs(r)...)
	if err != nil {
		res.err = err
		return res
	}
	defer s.stop()
	if r.replays {
		if err := storeReplays(s, h.cfg.replayKeys); err != nil {
			res.err = err
			return res
		}
	}
	if h.cfg.warmup > 0 {
		if _, _, err := runWrk(s.url("/"), h.loadFor(r, h.cfg.warmup, "warmup")); err != nil {
			res.err = err
			return res
		}
	}
	before, err := s.stats()
	if err != nil {
		res.err = err
		return res
	}
	cpuBefore, cpuErr := s.cpu()
	redisAddr := h.redisAddr(r)
	redisBefore, redisErr := redisCPU(redisAddr)
	var runs []wrkResult
	var requests int64
	for i := range h.cfg.reps {
		w, _, err := runWrk(s.url("/"), h.loadFor(r, h.cfg.duration, fmt.Sprintf("run%d-%d", i, time.Now().UnixNano())))
		if err != nil {
			res.err = err
			return res
		}
		runs = append(runs, w)
		requests += w.requests
		res.errors += w.non2xx + w.sockErrs
	}
	cpuAfter, err := s.cpu()
	if cpuErr == nil && err == nil && requests > 0 {
		res.cpuPerReq = (cpuAfter - cpuBefore) / time.Duration(requests)
	}
	if redisAddr != "" && redisErr == nil && requests > 0 {
		if redisAfter, err := redisCPU(redisAddr); err == nil {
			res.redisCPUPerReq = (redisAfter - redisBefore) / time.Duration(requests)
		}
	}
	after, err := s.stats()
	if err != nil {
		res.err = err
		return res
	}
	if c := after.Commits - before.Commits; c > 0 {
		res.batch = float64(after.Writes-before.Writes) / float64(c)
		res.perCommit = float64(requests) / float64(c)
	}
	if f := after.Failed - before.Failed; f > 0 {
		fmt.Fprintf(os.Stderr, "bench: %s: %d commits failed\n", r.id(), f)
	}
	res.rps = median(runs, func(w wrkResult) float64 { return w.rps })
	res.min = slices.MinFunc(runs, func(a, b wrkResult) int { return cmp.Compare(a.rps, b.rps) }).rps
	res.max = slices.MaxFunc(runs, func(a, b wrkResult) int { return cmp.Compare(a.rps, b.rps) }).rps
	res.p50 = time.Duration(median(runs, func(w wrkResult) float64 { return float64(w.p50) }))
	res.p99 = time.Duration(median(runs, func(w wrkResult) float64 { return float64(w.p99) }))
	return res
}

func median(runs []wrkResult, f func(wrkResult) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// storeReplays stores the responses of the replay keys, then checks that
// asking again replays.
func storeReplays(s *server, n int) error {
	for i := range n {
		key := replayPrefix + strconv.Itoa(i)
		res, err := s.post("/", "Idempotency-Key", key)
		if err != nil {
			return fmt.Errorf("store replay key %s: %w", key, err)
		}
		if res.StatusCode != http.StatusOK || res.Header.Get("Idempotency-Replayed") != "" {
			return fmt.Errorf("store replay key %s: got status %d, replayed %q; want a fresh 200",
				key, res.StatusCode, res.Header.Get("Idempotency-Replayed"))
		}
	}
	res, err := s.post("/", "Idempotency-Key", replayPrefix+"0")
	if err != nil {
		return err
	}
	if res.Header.Get("Idempotency-Replayed") != "true" {
		return fmt.Errorf("replay key %s0 was not replayed (status %d)", replayPrefix, res.StatusCode)
	}
	return nil
}
