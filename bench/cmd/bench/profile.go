package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// profileRow CPU-profiles the server of row id under the row's load and
// prints the top of `go tool pprof -top`.
func (h *harness) profileRow(id string) error {
	var r row
	found := false
	for _, c := range rows(h.cfg.replayKeys) {
		if c.id() == id {
			r, found = c, true
		}
	}
	if !found {
		return fmt.Errorf("-profile: no row %q", id)
	}
	out := h.cfg.profileOut
	if out == "" {
		dir, err := os.MkdirTemp("", "porch-bench-profile-")
		if err != nil {
			return err
		}
		out = filepath.Join(dir, "cpu-"+strings.ReplaceAll(id, "/", "-")+".pprof")
	}
	s, err := startServer(h.cfg.server, h.serverArgs(r, "-pprof")...)
	if err != nil {
		return err
	}
	defer s.stop()
	if r.replays {
		if err := storeReplays(s, h.cfg.replayKeys); err != nil {
			return err
		}
	}
	if _, _, err := runWrk(s.url("/"), h.loadFor(r, max(h.cfg.warmup, time.Second), "warmup")); err != nil {
		return err
	}
	secs := int(h.cfg.duration / time.Second)
	got := make(chan error, 1)
	go func() { got <- fetchProfile(s.url("/debug/pprof/profile?seconds="+strconv.Itoa(secs)), out) }()
	w, _, err := runWrk(s.url("/"), h.loadFor(r, h.cfg.duration+time.Second, "profile"))
	if err != nil {
		return err
	}
	if err := <-got; err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(h.cfg.profileTop), h.cfg.server, out).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %v\n%s", err, top)
	}
	fmt.Printf("\nCPU profile of %s under `wrk -t%d -c%d` (%s req/s while profiled), written to %s:\n\n```\n%s```\n",
		id, h.threads(), h.conns, thousands(w.rps), out, top)
	return nil
}

func fetchProfile(url, path string) error {
	res, err := debugClient.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, res.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
