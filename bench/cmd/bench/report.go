package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// printTable prints the main table, one line per row run, in row order.
func printTable(h *harness) {
	fmt.Println()
	fmt.Println("| row | client keys | req/s (runs' range) | p50 | p99 | × httprate | writes/commit | req/commit | errors | server CPU/req |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows(h.cfg.replayKeys) {
		res, ok := h.results[r.id()]
		if !ok {
			continue
		}
		keys := r.keys
		if r.mode == "porch-idem" {
			keys = "one (" + r.keys + ")"
		}
		if res.err != nil {
			fmt.Printf("| %s | %s | failed: %s | | | | | | | |\n", r.label, keys, oneLine(res.err.Error()))
			continue
		}
		ratio := "—"
		if base, ok := h.results[r.baseTo]; ok && base.err == nil && base.rps > 0 {
			ratio = fmt.Sprintf("%.2f", res.rps/base.rps)
		}
		batch, perCommit := "—", "—"
		if r.porch || r.mode == "naive" || r.mode == "naive-postgres" {
			batch, perCommit = fmt.Sprintf("%.1f", res.batch), fmt.Sprintf("%.1f", res.perCommit)
			if res.perCommit == 0 {
				perCommit = "no commits"
			}
		}
		cpu := "—"
		if res.cpuPerReq > 0 {
			cpu = fmt.Sprintf("%.1f µs", float64(res.cpuPerReq)/float64(time.Microsecond))
		}
		fmt.Printf("| %s | %s | %s (%s–%s) | %s | %s | %s | %s | %s | %d | %s |\n",
			r.label, keys, thousands(res.rps), thousands(res.min), thousands(res.max),
			ms(res.p50), ms(res.p99), ratio, batch, perCommit, res.errors, cpu)
	}
	fmt.Println()
	fmt.Println("Ratios divide by go-chi/httprate with the same client keys (one key for the Idempotent rows).")
	fmt.Println("writes/commit is the committer's mean batch over the measured runs, req/commit the requests answered per commit;")
	fmt.Println("errors are non-2xx answers and socket errors; server CPU/req is the server process's user + system CPU time over the")
	fmt.Println("measured runs divided by the requests they answered (wrk shares the cores, so it is the steadier cost figure).")
}

// printFloors prints, for each row that has one, its ratios to the row
// measuring what durability costs it: porch on SQLite against the
// durability floor at the same synchronous level, porch on PostgreSQL
// (one key) against pgbench's one-row upsert with the same
// synchronous_commit and as many clients as wrk has connections.
func printFloors(h *harness) {
	lines := againstLines(h, func(r row) string { return r.floorTo })
	if len(lines) == 0 {
		return
	}
	printAgainst(lines)
	fmt.Println("Against what durability costs, in the same run: porch on SQLite ÷ the durability floor at the same synchronous level;")
	fmt.Println("porch on PostgreSQL, one key, ÷ pgbench's one-row upsert with the same synchronous_commit and as many clients as wrk")
	fmt.Println("has connections (pgbench's tps as req/s; its CPU is the database's, not measured, so that ratio is blank).")
}

// printNaive prints porch's PostgreSQL rows against the limiter a user
// writes by hand (naive-postgres) at the same durability and client keys.
func printNaive(h *harness) {
	lines := againstLines(h, func(r row) string { return r.naiveTo })
	if len(lines) == 0 {
		return
	}
	printAgainst(lines)
	fmt.Println("Against what a chi user writes by hand, in the same run: porch on PostgreSQL ÷ one autocommit upsert a request on a")
	fmt.Println("pgx pool of 64, answered after its commit, with the same synchronous_commit (off for SurvivesProcessCrash). Server")
	fmt.Println("CPU is each server process's own; PostgreSQL's backends are not counted, for either.")
}

// printNaiveByConns prints, when the run had several connection counts,
// porch's PostgreSQL rows against the hand-written limiter at each count.
func printNaiveByConns(h *harness) {
	if len(h.cfg.conns) < 2 {
		return
	}
	var lines []string
	for _, r := range rows(h.cfg.replayKeys) {
		if r.naiveTo == "" {
			continue
		}
		cells := make([]string, len(h.cfg.conns))
		found := false
		for i, c := range h.cfg.conns {
			res, ok1 := h.byConns[c][r.id()]
			base, ok2 := h.byConns[c][r.naiveTo]
			if !ok1 || !ok2 || res.err != nil || base.err != nil || base.rps == 0 {
				cells[i] = "—"
				continue
			}
			found = true
			cells[i] = fmt.Sprintf("%.2f (%s / %s)", res.rps/base.rps, thousands(res.rps), thousands(base.rps))
			if res.cpuPerReq > 0 && base.cpuPerReq > 0 {
				cells[i] += fmt.Sprintf(", CPU %.2f", float64(res.cpuPerReq)/float64(base.cpuPerReq))
			}
		}
		if found {
			lines = append(lines, fmt.Sprintf("| %s | %s | %s |", r.label, r.keys, strings.Join(cells, " | ")))
		}
	}
	if len(lines) == 0 {
		return
	}
	head := make([]string, len(h.cfg.conns))
	rule := make([]string, len(h.cfg.conns))
	for i, c := range h.cfg.conns {
		head[i], rule[i] = fmt.Sprintf("c=%d", c), "---:"
	}
	fmt.Println()
	fmt.Println("### porch ÷ hand-written PostgreSQL, by connections")
	fmt.Println()
	fmt.Printf("| row | client keys | %s |\n", strings.Join(head, " | "))
	fmt.Printf("| --- | --- | %s |\n", strings.Join(rule, " | "))
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println()
	fmt.Println("Each cell: porch's req/s ÷ the hand-written limiter's at the same durability and client keys (porch / hand-written),")
	fmt.Println("then porch's server CPU per request ÷ the hand-written server's; all in this run.")
}

// againstLines are the rows of an against-table: each row run that to
// names another row run, divided by it.
func againstLines(h *harness, to func(row) string) []string {
	all := rows(h.cfg.replayKeys)
	var lines []string
	for _, r := range all {
		id := to(r)
		res, ok1 := h.results[r.id()]
		base, ok2 := h.results[id]
		if id == "" || !ok1 || !ok2 || res.err != nil || base.err != nil || base.rps == 0 {
			continue
		}
		other := all[slices.IndexFunc(all, func(f row) bool { return f.id() == id })]
		cpu := "—"
		if res.cpuPerReq > 0 && base.cpuPerReq > 0 {
			cpu = fmt.Sprintf("%.2f", float64(res.cpuPerReq)/float64(base.cpuPerReq))
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %.2f | %s | %.2f |", r.label, r.keys, other.label,
			res.rps/base.rps, cpu, float64(res.p99)/float64(base.p99)))
	}
	return lines
}

// printAgainst prints an against-table's header and lines; its caller
// prints what it divides.
func printAgainst(lines []string) {
	fmt.Println()
	fmt.Println("| row | client keys | against | req/s × it | server CPU/req × it | p99 × it |")
	fmt.Println("| --- | --- | --- | ---: | ---: | ---: |")
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println()
}

// printMemory prints the memory table.
func printMemory(mem []memResult, cfg config) {
	fmt.Println()
	fmt.Println("| client keys | RSS at baseline | RSS after the keys | RSS after expiry | after expiry ÷ baseline | Go heap in use (baseline / keys / expiry) |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | --- |")
	for _, m := range mem {
		if m.err != nil {
			fmt.Printf("| %s | failed: %s | | | | |\n", thousands(float64(m.keys)), oneLine(m.err.Error()))
			continue
		}
		fmt.Printf("| %s | %s | %s | %s | %.2f | %s / %s / %s |\n", thousands(float64(m.keys)),
			mib(m.baseline), mib(m.afterKeys), mib(m.afterExpiry), float64(m.afterExpiry)/float64(m.baseline),
			mib(int64(m.heapBase)), mib(int64(m.heapKeys)), mib(int64(m.heapExpiry)))
	}
	fmt.Println()
	fmt.Printf("porch Limiter on SQLite, window %s, keys sent from %d connections", cfg.memWindow, memConns)
	for i, m := range mem {
		if m.err == nil {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			fmt.Printf("%s%s keys at %s req/s", sep, thousands(float64(m.keys)), thousands(m.driveRate))
		}
	}
	fmt.Println("). RSS is VmRSS after runtime/debug.FreeOSMemory.")
	fmt.Print("Expiry: the server's clock is moved past the window, then a trickle from other clients lets each actor forget")
	for _, m := range mem {
		if m.err == nil {
			fmt.Printf("; %s requests after %s keys", thousands(float64(m.trickle)), thousands(float64(m.keys)))
		}
	}
	fmt.Println(".")
}

// target is one of the targets, measured.
type target struct {
	what     string
	measured string
	met      bool
	known    bool
}

// printTargets prints the targets that this run measured.
func printTargets(h *harness, mem []memResult) {
	var ts []target
	ratio := func(a, b string) (float64, bool) {
		x, ok1 := h.results[a]
		y, ok2 := h.results[b]
		if !ok1 || !ok2 || x.err != nil || y.err != nil || y.rps == 0 {
			return 0, false
		}
		return x.rps / y.rps, true
	}
	p99 := func(a, b string) (float64, bool) {
		x, ok1 := h.results[a]
		y, ok2 := h.results[b]
		if !ok1 || !ok2 || x.err != nil || y.err != nil || y.p99 == 0 {
			return 0, false
		}
		return float64(x.p99) / float64(y.p99), true
	}
	add := func(what string, v float64, ok bool, met bool, unit string) {
		ts = append(ts, target{what: what, measured: fmt.Sprintf("%.2f%s", v, unit), met: met, known: ok})
	}
	keys := map[string]string{"one": "one key", "many": "many keys"}
	for _, k := range []struct {
		keys string
		min  float64
	}{{"one", 0.8}, {"many", 0.7}} {
		v, ok := ratio("porch-sqlite/"+k.keys, "httprate/"+k.keys)
		add(fmt.Sprintf("porch SQLite ≥ %.1f × httprate req/s, %s", k.min, keys[k.keys]), v, ok, v >= k.min, " ×")
	}
	for _, k := range []string{"one", "many"} {
		v, ok := p99("porch-sqlite/"+k, "httprate/"+k)
		add(fmt.Sprintf("porch SQLite p99 ≤ 2 × httprate p99, %s", keys[k]), v, ok, v <= 2, " ×")
	}
	for _, k := range []string{"one", "many"} {
		v, ok := ratio("porch-sqlite/"+k, "naive/"+k)
		add(fmt.Sprintf("porch SQLite ≥ 15 × naive req/s, %s", keys[k]), v, ok, v >= 15, " ×")
	}
	v, ok := ratio("porch-idem/replay", "porch-idem/unkeyed")
	add("keyed replays ≥ 0.5 × unkeyed req/s", v, ok, v >= 0.5, " ×")
	for _, m := range mem {
		if m.err == nil {
			v := float64(m.afterExpiry)/float64(m.baseline) - 1
			ts = append(ts, target{what: fmt.Sprintf("RSS within 10%% of baseline after %s keys expired", thousands(float64(m.keys))),
				measured: fmt.Sprintf("%+.0f%%", v*100), met: v <= 0.10, known: true})
		}
	}
	fmt.Println()
	fmt.Println("| target | measured | met |")
	fmt.Println("| --- | ---: | --- |")
	for _, t := range ts {
		if !t.known {
			continue
		}
		met := "no"
		if t.met {
			met = "yes"
		}
		fmt.Printf("| %s | %s | %s |\n", t.what, t.measured, met)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// thousands formats v rounded to an integer with thin thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
