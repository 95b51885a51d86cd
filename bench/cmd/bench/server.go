package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one running benchserver process.
type server struct {
	cmd    *exec.Cmd
	addr   string // host:port it listens on
	exited chan error
}

// startServer runs bin with args and waits for its listening line.
func startServer(bin string, args ...string) (*server, error) {
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, exited: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "benchserver: listening on "); ok {
				addr <- a
				break
			}
		}
		io.Copy(io.Discard, out) //nolint:errcheck // drain until the process exits
		s.exited <- cmd.Wait()
	}()
	select {
	case s.addr = <-addr:
		return s, nil
	case err := <-s.exited:
		return nil, fmt.Errorf("benchserver %s exited before listening: %v", strings.Join(args, " "), err)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-s.exited
		return nil, fmt.Errorf("benchserver %s did not listen within 60s", strings.Join(args, " "))
	}
}

// url is the server's base URL plus path.
func (s *server) url(path string) string { return "http://" + s.addr + path }

// stop asks the server to shut down gracefully and kills it if it has not
// within 30s.
func (s *server) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		return err
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		return errors.New("benchserver did not stop within 30s; killed")
	}
}

// serverStats is the body of the server's GET /debug/stats.
type serverStats struct {
	Commits     int64   `json:"commits"`
	Writes      int64   `json:"writes"`
	Failed      int64   `json:"failed"`
	MeanBatch   float64 `json:"mean_batch"`
	HeapInuse   uint64  `json:"heap_inuse"`
	HeapObjects uint64  `json:"heap_objects"`
}

var debugClient = &http.Client{Timeout: 2 * time.Minute}

func (s *server) stats() (serverStats, error) {
	var st serverStats
	res, err := debugClient.Get(s.url("/debug/stats"))
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	return st, json.NewDecoder(res.Body).Decode(&st)
}

// post sends a POST with no body to the server's path, with headers given as
// name, value pairs, and returns the response with its body read.
func (s *server) post(path string, headers ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url(path), nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := debugClient.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, res.Body) //nolint:errcheck // only the status matters
	res.Body.Close()
	return res, nil
}

// rss reads the server's resident set size from /proc, after asking it to
// return freed memory to the OS.
func (s *server) rss() (int64, error) {
	res, err := s.post("/debug/free")
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusNoContent {
		return 0, fmt.Errorf("POST /debug/free: status %d", res.StatusCode)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// cpu is the CPU time the server's process has used so far, user and
// system, from /proc/PID/stat (in USER_HZ ticks, 100 a second on Linux).
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one. utime and stime are fields 14
	// and 15, so the 12th and 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// userHZ is the unit of /proc's CPU times, fixed at 100 for user space on
// every Linux architecture Go runs on.
const userHZ = 100
