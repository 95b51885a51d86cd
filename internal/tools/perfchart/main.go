// Command perfchart draws the load harness's throughput table as SVG bar
// charts: requests per second (the median run, with the runs' range) and
// p50/p99 latency, one bar per row.
//
// It reads Markdown: docs/performance.md, or the saved output of `just
// bench`, which prints the same table. The first table whose header starts
// "| row | client keys | req/s" is drawn; its rows are parsed as the
// harness prints them (bench/cmd/bench/report.go). The charts are checked in
// under docs/, so that README.md and the docs can embed them, and the site
// copies them.
//
//	go run ./internal/tools/perfchart                        # docs/performance.md → docs/perf-*.svg
//	go run ./internal/tools/perfchart -in /tmp/bench.txt     # a saved `just bench` output
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "docs/performance.md", "the Markdown `file` holding the throughput table; - reads stdin")
	out := flag.String("out", "docs", "the `directory` to write perf-reqs.svg and perf-latency.svg to")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintf(os.Stderr, "perfchart: %v\n", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	var r io.Reader = os.Stdin
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	t, err := parse(r)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	for name, draw := range map[string]func(io.Writer, table) error{
		"perf-reqs.svg":    drawThroughput,
		"perf-latency.svg": drawLatency,
	} {
		path := filepath.Join(out, name)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		err = draw(f, t)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Printf("perfchart: %s, %d rows\n", path, len(t.rows))
	}
	return nil
}

// table is the throughput table: its rows, and where it was measured when
// the text says so.
type table struct {
	measured string // "commit 068ee3d751b4, 2026-11-30", or ""
	rows     []row
}

// row is one line of the table.
type row struct {
	label, keys   string
	rps, min, max float64 // req/s: the median run, and the runs' range
	p50, p99      float64 // milliseconds
}

var (
	headerPrefix = regexp.MustCompile(`^\|\s*row\s*\|\s*client keys\s*\|\s*req/s`)
	// rpsCell is "41,729 (37,760–45,595)".
	rpsCell = regexp.MustCompile(`^([\d,]+)\s*\(([\d,]+)\s*[–-]\s*([\d,]+)\)$`)
	// measuredAt finds "Measured on 2026-11-30 at commit `068ee3d751b4`".
	measuredAt = regexp.MustCompile("Measured on (\\S+) at commit `([0-9a-f]+)`")
)

// errNoTable says the input has no throughput table.
var errNoTable = errors.New("no throughput table (a header starting \"| row | client keys | req/s\")")

// parse reads the first throughput table in Markdown from r. A row the
// harness reports as failed is left out.
func parse(r io.Reader) (table, error) {
	var t table
	sc := bufio.NewScanner(r)
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if t.measured == "" {
			if m := measuredAt.FindStringSubmatch(line); m != nil {
				t.measured = "commit " + m[2] + ", " + m[1]
			}
		}
		switch {
		case !inTable && headerPrefix.MatchString(line):
			inTable = true
		case inTable && !strings.HasPrefix(line, "|"):
			if len(t.rows) == 0 {
				return t, errors.New("the throughput table has no rows")
			}
			return t, nil
		case inTable && strings.HasPrefix(line, "| ---"):
		case inTable:
			rw, ok, err := parseRow(line)
			if err != nil {
				return t, err
			}
			if ok {
				t.rows = append(t.rows, rw)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return t, err
	}
	if !inTable {
		return t, errNoTable
	}
	if len(t.rows) == 0 {
		return t, errors.New("the throughput table has no rows")
	}
	return t, nil
}

// parseRow parses one table line; ok is false for a failed row.
func parseRow(line string) (r row, ok bool, err error) {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	if len(cells) < 5 {
		return r, false, fmt.Errorf("row %q: %d cells, want at least 5", line, len(cells))
	}
	r.label, r.keys = cells[0], cells[1]
	if strings.HasPrefix(cells[2], "failed") {
		return r, false, nil
	}
	m := rpsCell.FindStringSubmatch(cells[2])
	if m == nil {
		return r, false, fmt.Errorf("row %q: req/s %q is not \"N (MIN–MAX)\"", r.label, cells[2])
	}
	nums := []*float64{&r.rps, &r.min, &r.max}
	for i, s := range m[1:] {
		if *nums[i], err = strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64); err != nil {
			return r, false, fmt.Errorf("row %q: %w", r.label, err)
		}
	}
	if r.p50, err = millis(cells[3]); err != nil {
		return r, false, fmt.Errorf("row %q: p50: %w", r.label, err)
	}
	if r.p99, err = millis(cells[4]); err != nil {
		return r, false, fmt.Errorf("row %q: p99: %w", r.label, err)
	}
	return r, true, nil
}

// millis parses a latency cell, "1.33 ms" or "850 µs", into milliseconds.
func millis(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	if err != nil {
		return 0, err
	}
	switch unit {
	case "ms":
		return v, nil
	case "µs", "us":
		return v / 1000, nil
	case "s":
		return v * 1000, nil
	}
	return 0, fmt.Errorf("unit %q in %q", unit, s)
}
