package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The Redis rows: porch on Redis beside ulule/limiter and go-redis's
// redis_rate on the same server (the benchserver's -redis: the machine's,
// PORCH_TEST_REDIS or 127.0.0.1:6379, as it runs, no persistence), and
// porch on a server the harness starts with appendfsync always, for the
// cost of durability.
func redisRows() []row {
	var out []row
	for _, m := range []struct {
		label, mode string
		porch       bool
		lease       int
	}{
		{"porch Limiter, Redis", "porch-redis", true, 0},
		{"porch Limiter, Redis appendfsync always", "porch-redis-aof", true, 0},
		{"porch Limiter, Redis appendfsync always, Lease 64", "porch-redis-aof", true, 64},
		{"ulule/limiter v3, Redis", "ulule-redis", false, 0},
		{"go-redis/redis_rate v10, Redis", "redis-rate", false, 0},
	} {
		out = append(out,
			row{label: m.label, mode: m.mode, lease: m.lease, keys: "one", porch: m.porch, baseTo: "httprate/one"},
			row{label: m.label, mode: m.mode, lease: m.lease, keys: "many", porch: m.porch, baseTo: "httprate/many", script: "xff.lua"})
	}
	return out
}

// redisArgs are the benchserver flags a Redis row needs beyond its mode:
// the durable server's address, started on first use.
func (h *harness) redisArgs(r row) []string {
	if r.mode != "porch-redis-aof" {
		return nil
	}
	h.aofOnce.Do(func() { h.aofAddr, h.aofErr = h.startAOF() })
	if h.aofErr != nil {
		fmt.Fprintf(os.Stderr, "bench: redis-server with appendfsync always: %v\n", h.aofErr)
		return nil // the row then fails at Open with its own error
	}
	return []string{"-redis-aof", h.aofAddr}
}

// redisAddr is the Redis server r's benchserver uses, or "" for a row
// that uses none: the durable server for porch-redis-aof, else the
// benchserver's default (PORCH_TEST_REDIS or 127.0.0.1:6379).
func (h *harness) redisAddr(r row) string {
	switch r.mode {
	case "porch-redis-aof":
		return h.aofAddr
	case "porch-redis", "ulule-redis", "redis-rate":
		if a := os.Getenv("PORCH_TEST_REDIS"); a != "" {
			return a
		}
		return "127.0.0.1:6379"
	}
	return ""
}

// redisCPU is the CPU time redis-server at addr has used: INFO cpu's
// used_cpu_sys and used_cpu_user (the main process, every thread), which
// the Redis rows compare per request, since the server's work is a peer's
// as much as the benchserver's.
func redisCPU(addr string) (time.Duration, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// startAOF runs a redis-server with appendonly yes and appendfsync always
// on a free loopback port, in a directory under the run's, until stopAOF.
func (h *harness) startAOF() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp(h.dir, "redis-aof-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	if err := cmd.Start(); err != nil {
		return "", err
	}
	h.aof = cmd
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no PONG from %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // between PINGs: readiness is the PONG
	}
}

// stopAOF kills the durable server, if one was started.
func (h *harness) stopAOF() {
	if h.aof != nil {
		h.aof.Process.Kill()
		h.aof.Wait()
	}
}

// exactModes are the limiters the exactness check bursts: one client's
// parallel requests against a limit of exactLimit.
var exactModes = []struct{ label, mode string }{
	{"go-chi/httprate (memory)", "httprate"},
	{"porch Limiter, SQLite", "porch-sqlite"},
	{"porch Limiter, Redis", "porch-redis"},
	{"ulule/limiter v3, Redis", "ulule-redis"},
	{"go-redis/redis_rate v10, Redis", "redis-rate"},
}

const exactLimit, exactBurst = 100, 300

// printExact sends, for every mode of exactModes with a selected row,
// exactBurst parallel requests from one client at a limit of exactLimit
// per hour, and prints how many each served: a limiter that counts with
// get-then-increment, or keeps its count per process, serves more.
func printExact(h *harness) {
	var lines []string
	for _, m := range exactModes {
		if !slices.ContainsFunc(rows(h.cfg.replayKeys), func(r row) bool { return r.mode == m.mode && h.selected(r.id()) }) {
			continue
		}
		served, other, err := h.burst(m.mode)
		if err != nil {
			lines = append(lines, fmt.Sprintf("| %s | failed: %s | | |", m.label, oneLine(err.Error())))
			continue
		}
		verdict := "exact"
		if served > exactLimit {
			verdict = fmt.Sprintf("**over-served by %d**", served-exactLimit)
		} else if served < exactLimit {
			verdict = fmt.Sprintf("under-served by %d", exactLimit-served)
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %d | %s |", m.label, served, other, verdict))
	}
	defer printRedisTarget(h)
	if len(lines) == 0 {
		return
	}
	fmt.Println()
	fmt.Printf("Exactness: %d parallel requests from one client, limit %d per hour, each on its own connection.\n\n", exactBurst, exactLimit)
	fmt.Println("| limiter | served (200) | other than 200/429 | |")
	fmt.Println("| --- | ---: | ---: | --- |")
	for _, l := range lines {
		fmt.Println(l)
	}
}

// burst runs mode at exactLimit and sends it exactBurst parallel GETs.
func (h *harness) burst(mode string) (served, other int, err error) {
	args := append([]string{"-mode", mode, "-limit", strconv.Itoa(exactLimit)}, h.redisArgs(row{mode: mode})...)
	s, err := startServer(h.cfg.server, args...)
	if err != nil {
		return 0, 0, err
	}
	defer s.stop()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: exactBurst}}
	defer client.CloseIdleConnections()
	codes := make([]int, exactBurst)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range exactBurst {
		wg.Go(func() {
			<-start
			res, err := client.Get(s.url("/"))
			if err != nil {
				return
			}
			res.Body.Close()
			codes[i] = res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
		default:
			other++
		}
	}
	if other > 0 {
		err = fmt.Errorf("%d of %d requests answered neither 200 nor 429 (%s)", other, exactBurst, strings.TrimSpace(fmt.Sprint(codes[:10])))
	}
	return served, other, err
}

// printRedisTarget checks the project's target when its rows ran: porch
// on Redis at least 1.3× the faster Redis peer with many client keys.
func printRedisTarget(h *harness) {
	defer printRedisCPU(h)
	porch, ok := h.results["porch-redis/many"]
	if !ok || porch.err != nil {
		return
	}
	best, bestID := 0.0, ""
	for _, id := range []string{"ulule-redis/many", "redis-rate/many"} {
		if r, ok := h.results[id]; ok && r.err == nil && r.rps > best {
			best, bestID = r.rps, id
		}
	}
	if best == 0 {
		return
	}
	ratio := porch.rps / best
	verdict := "met"
	if ratio < 1.3 {
		verdict = "MISSED"
	}
	fmt.Printf("\nTarget: porch on Redis ≥ 1.3× the faster Redis peer, many keys: %.2f× %s — %s.\n", ratio, bestID, verdict)
}

// printRedisCPU prints, for the Redis rows run, the CPU each request cost
// the benchserver and redis-server: a peer that does less in Go may do
// more in Redis, and on a shared machine the sum is what a request costs.
func printRedisCPU(h *harness) {
	var lines []string
	for _, r := range redisRows() {
		res, ok := h.results[r.id()]
		if !ok || res.err != nil || res.redisCPUPerReq == 0 {
			continue
		}
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %.1f µs | %.1f µs | %.1f µs |", r.label, r.keys, thousands(res.rps),
			us(res.cpuPerReq), us(res.redisCPUPerReq), us(res.cpuPerReq+res.redisCPUPerReq)))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| row | client keys | req/s | server CPU/req | redis-server CPU/req | both |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: |")
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println()
	fmt.Println("redis-server CPU/req is INFO cpu's used_cpu_sys + used_cpu_user over the measured runs ÷ the requests they answered.")
}
