package main

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

//go:embed lua/*.lua
var scripts embed.FS

// writeScripts copies the Lua scripts into dir, for wrk to load.
func writeScripts(dir string) error {
	entries, err := scripts.ReadDir("lua")
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := scripts.ReadFile("lua/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// load is one wrk run's shape.
type load struct {
	threads, conns int
	duration       time.Duration
	script         string   // path of the Lua script, or "" for a plain GET
	args           []string // the script's arguments
}

// wrkResult is what one wrk run measured.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
	requests int64
	non2xx   int64 // non-2xx/3xx responses
	sockErrs int64 // connect, read, write errors and timeouts
}

var (
	reRPS      = regexp.MustCompile(`(?m)^Requests/sec:\s+([\d.]+)`)
	reP50      = regexp.MustCompile(`(?m)^\s+50%\s+([\d.]+)(us|ms|s|m)\s*$`)
	reP99      = regexp.MustCompile(`(?m)^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$`)
	reRequests = regexp.MustCompile(`(?m)^\s+(\d+) requests in`)
	reNon2xx   = regexp.MustCompile(`(?m)^\s+Non-2xx or 3xx responses:\s+(\d+)`)
	reSockErrs = regexp.MustCompile(`(?m)^\s+Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// runWrk drives url with l and parses wrk's report.
func runWrk(url string, l load) (wrkResult, string, error) {
	args := []string{
		"-t" + strconv.Itoa(l.threads), "-c" + strconv.Itoa(l.conns),
		"-d" + strconv.Itoa(max(1, int(l.duration.Round(time.Second)/time.Second))) + "s",
		"--latency", "--timeout", "10s",
	}
	if l.script != "" {
		args = append(args, "-s", l.script)
	}
	args = append(args, url)
	if len(l.args) > 0 {
		args = append(append(args, "--"), l.args...)
	}
	out, err := exec.Command("wrk", args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, string(out), fmt.Errorf("wrk: %v\n%s", err, out)
	}
	r, err := parseWrk(string(out))
	return r, string(out), err
}

func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := reRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk: no Requests/sec in its output:\n%s", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	var err error
	if r.p50, err = parseLatency(reP50, out); err != nil {
		return r, err
	}
	if r.p99, err = parseLatency(reP99, out); err != nil {
		return r, err
	}
	if m := reRequests.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reSockErrs.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.sockErrs += n
		}
	}
	return r, nil
}

func parseLatency(re *regexp.Regexp, out string) (time.Duration, error) {
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk: no latency percentile in its output:\n%s", out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}[m[2]]
	return time.Duration(v * float64(unit)), nil
}
