package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeServers stands in for what finder touches: the environment, the
// servers that answer, and Docker. It records what was tried, in order.
type fakeServers struct {
	env       map[string]string
	answering map[string]bool // DSNs whose ping succeeds
	docker    bool            // whether container succeeds
	tried     []string        // DSNs pinged, then "container"
	deadlines map[string]time.Duration
}

func (s *fakeServers) finder() finder {
	return finder{
		getenv: func(k string) string { return s.env[k] },
		ping: func(ctx context.Context, dsn string) error {
			s.tried = append(s.tried, dsn)
			if d, ok := ctx.Deadline(); ok {
				s.deadlines[dsn] = time.Until(d)
			}
			if s.answering[dsn] {
				return nil
			}
			return errors.New("connection refused")
		},
		container: func() (string, error) {
			s.tried = append(s.tried, "container")
			if s.docker {
				return "postgres://container", nil
			}
			return "", errors.New("no Docker engine")
		},
	}
}

func TestFindOrder(t *testing.T) {
	const mine = "postgres://me@db.example/x"
	tests := []struct {
		name      string
		env       string
		answering []string
		docker    bool
		wantDSN   string
		wantTried []string
		wantErr   []string // substrings of the error; nil: no error
	}{
		{"the variable wins over a local server", mine, []string{mine, LocalDSN}, true,
			mine, []string{mine}, nil},
		{"a set variable that does not answer fails, never falls through", mine, []string{LocalDSN}, true,
			"", []string{mine}, []string{EnvDSN + " is set but does not answer"}},
		{"unset: the local server, before Docker", "", []string{LocalDSN}, true,
			LocalDSN, []string{LocalDSN}, nil},
		{"unset, no local server: a container", "", nil, true,
			"postgres://container", []string{LocalDSN, "container"}, nil},
		{"nothing: the reason names the variable", "", nil, false,
			"", []string{LocalDSN, "container"}, []string{"set " + EnvDSN, LocalDSN, "no Docker engine"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &fakeServers{env: map[string]string{EnvDSN: tc.env}, answering: map[string]bool{},
				docker: tc.docker, deadlines: map[string]time.Duration{}}
			for _, dsn := range tc.answering {
				s.answering[dsn] = true
			}
			dsn, err := s.finder().find()
			if dsn != tc.wantDSN {
				t.Errorf("DSN: got %q, want %q", dsn, tc.wantDSN)
			}
			if fmt.Sprint(s.tried) != fmt.Sprint(tc.wantTried) {
				t.Errorf("tried: got %q, want %q", s.tried, tc.wantTried)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("got error %v, want none", err)
			case tc.wantErr != nil && err == nil:
				t.Errorf("got no error, want one with %q", tc.wantErr)
			}
			for _, sub := range tc.wantErr {
				if err != nil && !strings.Contains(err.Error(), sub) {
					t.Errorf("error %q does not contain %q", err, sub)
				}
			}
			// A machine without a server must not wait long on the guess.
			if d, ok := s.deadlines[LocalDSN]; ok && d > LocalTimeout {
				t.Errorf("the local try's deadline: got %v away, want at most %v", d, LocalTimeout)
			}
		})
	}
}

// recordingTB records what unavailable asks of a test instead of ending it.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                        {}
func (r *recordingTB) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recordingTB) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestUnavailable(t *testing.T) {
	_, err := (&fakeServers{answering: map[string]bool{}, deadlines: map[string]time.Duration{}}).finder().find()
	if err == nil {
		t.Fatal("find with no server: got no error")
	}

	var skip recordingTB
	unavailable(&skip, err, false)
	if skip.failed != "" || !strings.Contains(skip.skipped, EnvDSN) {
		t.Errorf("not required: got skip %q, failure %q; want a skip naming %s", skip.skipped, skip.failed, EnvDSN)
	}

	var fail recordingTB
	unavailable(&fail, err, true)
	if fail.skipped != "" || !strings.Contains(fail.failed, EnvRequire) || !strings.Contains(fail.failed, EnvDSN) {
		t.Errorf("required: got skip %q, failure %q; want a failure naming %s and %s", fail.skipped, fail.failed, EnvRequire, EnvDSN)
	}
}
