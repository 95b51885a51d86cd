package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkServe runs the harness's server (newServer, the App on a
// loopback listener) for a mode and drives it as wrk does: 64 keep-alive
// connections, each sending GET / and reading the answer, from one client
// address or from 131,072 in X-Forwarded-For (-trust-proxy, as the
// harness's many-keys rows). The client's work is small and the same for
// every mode, so an instruction count of this benchmark (valgrind
// --tool=callgrind at two b.N, differenced) compares the servers' CPU per
// request without the noise of shared cores; what it cannot count is the
// kernel's share (socket I/O, the fsync), which the req/commit metric
// stands for. The porch-idem cases send POSTs, as the harness's
// idempotency rows do: unkeyed without an Idempotency-Key, fresh with a new
// one each.
func BenchmarkServe(b *testing.B) {
	for _, mode := range []string{"none", "httprate", "porch-sqlite"} {
		for _, many := range []bool{false, true} {
			name := mode + "/one"
			if many {
				name = mode + "/many"
			}
			b.Run(name, func(b *testing.B) { benchServe(b, mode, many, "") })
		}
	}
	for _, load := range []string{"unkeyed", "fresh"} {
		b.Run("porch-idem/"+load, func(b *testing.B) { benchServe(b, "porch-idem", false, load) })
	}
}

// serveConns is the harness's wrk connection count.
const serveConns = 64

// benchServe drives mode's server; idem is "" for GETs, else the
// porch-idem load ("unkeyed" or "fresh") of POSTs.
func benchServe(b *testing.B, mode string, many bool, idem string) {
	args := []string{"-mode", mode, "-db", b.TempDir() + "/bench.db"}
	if many {
		args = append(args, "-trust-proxy")
	}
	cfg, err := parseFlags(args)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := newServer(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Serve(ctx, l) }()
	defer func() { cancel(); <-served }()
	addr := l.Addr().String()
	before := serveStats(b, addr)

	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	usr, sys := cpuTimes()
	for range serveConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveClient(addr, many, idem, &next, int64(b.N)); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	usr2, sys2 := cpuTimes()
	b.ReportMetric(float64((usr2-usr).Microseconds())/float64(b.N), "user-µs/op")
	b.ReportMetric(float64((sys2-sys).Microseconds())/float64(b.N), "sys-µs/op")
	after := serveStats(b, addr)
	if commits := after.Commits - before.Commits; commits > 0 {
		b.ReportMetric(float64(b.N)/float64(commits), "req/commit")
		b.ReportMetric(float64(after.Writes-before.Writes)/float64(commits), "writes/commit")
	}
}

// serveClient sends requests on one keep-alive connection until n have
// been sent by all the clients together.
func serveClient(addr string, many bool, idem string, next *atomic.Int64, n int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	var req []byte
	for {
		i := next.Add(1)
		if i > n {
			return nil
		}
		switch idem {
		case "":
			req = append(req[:0], "GET / HTTP/1.1\r\nHost: bench\r\n"...)
		case "unkeyed":
			req = append(req[:0], "POST / HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\n"...)
		default:
			// fresh.lua's keys: unique to the run, one per request.
			req = append(req[:0], "POST / HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\n"...)
			req = fmt.Appendf(req, "Idempotency-Key: run-0-%d\r\n", i)
		}
		if many {
			// A spread of the 131,072 addresses xff.lua draws from, the
			// same sequence every run.
			k := i * 40503 % 131072
			req = fmt.Appendf(req, "X-Forwarded-For: 198.%d.%d.%d\r\n", 18+k/65536, k/256%256, k%256)
		}
		req = append(req, "\r\n"...)
		if _, err := conn.Write(req); err != nil {
			return err
		}
		if err := readAnswer(rd); err != nil {
			return err
		}
	}
}

// readAnswer reads one response, failing on a status other than 200.
func readAnswer(rd *bufio.Reader) error {
	status, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200 ") {
		return fmt.Errorf("got %q, want 200", strings.TrimSpace(status))
	}
	length := -1
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := strings.CutPrefix(string(line), "Content-Length: "); ok {
			if length, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return err
			}
		}
	}
	if length < 0 {
		return fmt.Errorf("an answer without Content-Length")
	}
	_, err = rd.Discard(length)
	return err
}

// cpuTimes is the process's user and system CPU time so far: the server's
// and the clients' together, which the wall clock of shared cores is not.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// serveStats reads the server's commit counters.
func serveStats(b *testing.B, addr string) stats {
	res, err := http.Get("http://" + addr + "/debug/stats")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var s stats
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		b.Fatal(err)
	}
	return s
}
