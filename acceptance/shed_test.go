//go:build acceptance

package acceptance

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The load shedder's contract: with -max-inflight 4
// -critical-reserve 0.5, two slow checkouts in flight make GET /products
// 503 while two more checkouts are admitted, and a fifth is 503; /healthz
// answers 200 throughout. Every slow checkout is held until the gate hangs
// up on it (-checkout-delay far longer than the leg), and the gate learns
// how many are in flight from porch_shed_in_flight, never from a sleep.
func TestShedKeepsReserveForCritical(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-max-inflight", "4", "-critical-reserve", "0.5",
		"-checkout-delay", "10m", "-metrics-addr", "127.0.0.1:0", "-rate-limit", "1000")
	s.warm(t, 8)
	healthy := func(when string) {
		t.Helper()
		if r := s.get(t, "/healthz"); r.Status != http.StatusOK {
			t.Fatalf("GET /healthz %s: got %s, want 200", when, r)
		}
	}
	if r := s.get(t, "/products"); r.Status != http.StatusOK {
		t.Fatalf("GET /products idle: got %s, want 200", r)
	}

	held := newHeldCheckouts(t, s)
	held.start(2)
	held.waitInFlight(2)
	healthy("with 2 in flight")
	for range 2 { // the reserve holds however often it is asked
		r := s.get(t, "/products")
		checkProblem(t, r, http.StatusServiceUnavailable)
		checkShedRefusal(t, r)
	}
	held.start(2)
	held.waitInFlight(4)
	healthy("with 4 in flight")
	fifth := s.checkout(uuid.NewString(), mugOrder)
	checkProblem(t, fifth, http.StatusServiceUnavailable)
	checkShedRefusal(t, fifth)
	if r := s.get(t, "/products"); r.Status != http.StatusServiceUnavailable {
		t.Errorf("GET /products with 4 in flight: got %s, want 503", r)
	}
	// The four checkouts went past the shedder, the limiter and their
	// keys to the handler; the refusals cost no store work. The shedder
	// counts a checkout in flight before the limiter and its key have
	// seen it: wait until the last of them has reached its handler.
	waitFor(t, startTimeout, "the held checkouts to reach their handler", func() bool {
		return s.scrape(t)[`porch_idem_requests_total{outcome="executed"}`] >= 4
	})
	wantSamples(t, s.scrape(t), map[string]float64{
		`porch_shed_in_flight`: 4,
		`porch_shed_requests_total{class="critical",outcome="admitted"}`:     4,
		`porch_shed_requests_total{class="critical",outcome="refused"}`:      1,
		`porch_shed_requests_total{class="non_critical",outcome="admitted"}`: 1,
		`porch_shed_requests_total{class="non_critical",outcome="refused"}`:  3,
		`porch_idem_requests_total{outcome="executed"}`:                      4,
		`porch_rate_requests_total{limiter="default",verdict="allowed"}`:     5,
	})

	held.hangUp()
	s.waitInFlight(t, 0)
	healthy("once the checkouts hung up")
	if r := s.get(t, "/products"); r.Status != http.StatusOK {
		t.Errorf("GET /products once the checkouts hung up: got %s, want 200", r)
	}
	s.stop(t)
}

// checkShedRefusal fails unless r is the shedder's refusal: its problem
// type, and a Retry-After in whole seconds.
func checkShedRefusal(t *testing.T, r reply) {
	t.Helper()
	if !strings.Contains(string(r.Body), `"type":"https://porch.dev/problems/overloaded"`) {
		t.Errorf("refusal body: got %s, want the overloaded problem type", r.Body)
	}
	if ra := r.Header.Get("Retry-After"); ra == "" || strings.Trim(ra, "0123456789") != "" {
		t.Errorf("refusal Retry-After: got %q, want whole seconds", ra)
	}
}

// waitInFlight polls porch_shed_in_flight until it is n, failing at
// once if a held checkout was answered meanwhile (refused, where it should
// have been admitted).
func (h *heldCheckouts) waitInFlight(n float64) {
	h.t.Helper()
	h.s.waitInFlightOr(h.t, n, func() {
		select {
		case r := <-h.done:
			h.n--
			h.t.Fatalf("a held checkout was answered %s, want it admitted and in flight", r)
		default:
		}
	})
}

// waitInFlight polls porch_shed_in_flight until it is n.
func (s *storefront) waitInFlight(t *testing.T, n float64) {
	t.Helper()
	s.waitInFlightOr(t, n, func() {})
}

// waitInFlightOr is waitInFlight calling check between polls.
func (s *storefront) waitInFlightOr(t *testing.T, n float64, check func()) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		check()
		got, ok := s.scrape(t)[`porch_shed_in_flight`]
		if ok && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("porch_shed_in_flight: got %g, want %g within %s", got, n, startTimeout)
		}
		time.Sleep(readyPoll)
	}
}

// heldCheckouts are slow checkouts the gate holds open until hangUp
// cancels them; each is joined by hangUp or the test's cleanup.
type heldCheckouts struct {
	t      *testing.T
	s      *storefront
	ctx    context.Context
	cancel context.CancelFunc
	done   chan reply
	n      int
}

func newHeldCheckouts(t *testing.T, s *storefront) *heldCheckouts {
	ctx, cancel := context.WithCancel(t.Context())
	h := &heldCheckouts{t: t, s: s, ctx: ctx, cancel: cancel, done: make(chan reply, 16)}
	t.Cleanup(h.hangUp)
	return h
}

// start sends n checkouts, each with a key of its own, on goroutines.
func (h *heldCheckouts) start(n int) {
	for range n {
		h.n++
		go func() { // joined by hangUp
			req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, h.s.url+"/checkout", strings.NewReader(mugOrder))
			if err != nil {
				h.done <- reply{Err: err}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(keyHeader, uuid.NewString())
			res, err := h.s.client.Do(req)
			if err == nil {
				res.Body.Close()
				h.done <- reply{Status: res.StatusCode}
				return
			}
			h.done <- reply{Err: err}
		}()
	}
}

// hangUp cancels every held checkout and waits for each; none may have
// been answered before it hung up.
func (h *heldCheckouts) hangUp() {
	h.t.Helper()
	h.cancel()
	for ; h.n > 0; h.n-- {
		if r := <-h.done; !errors.Is(r.Err, context.Canceled) {
			h.t.Errorf("held checkout: got %s, want it still in flight when the gate hung up", r)
		}
	}
}

// Each refused command line of the shedder exits 2 before listening, with
// one line on stderr that names the flag.
func TestShedFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"-critical-reserve", "0.5"}, "-critical-reserve"},
		{[]string{"-max-inflight", "0", "-critical-reserve", "0.5"}, "-critical-reserve"},
		{[]string{"-max-inflight", "4", "-critical-reserve", "1"}, "-critical-reserve"},
		{[]string{"-max-inflight", "4", "-critical-reserve", "-0.5"}, "-critical-reserve"},
		{[]string{"-max-inflight", "4", "-critical-reserve", "1e400"}, "-critical-reserve"}, // past float64: still one line
		{[]string{"-max-inflight", "-1"}, "-max-inflight"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
		args := append([]string{"-addr", "127.0.0.1:0", "-db", newDB(t)}, tt.args...)
		cmd := exec.CommandContext(ctx, storefrontBin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run() //nolint:errcheck // the exit status is read from ProcessState
		cancel()
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.flag) || stdout.Len() != 0 {
			t.Errorf("storefront %s: got exit status %d, stderr %q, stdout %q; want 2 and one line naming %s",
				strings.Join(tt.args, " "), code, stderr.String(), stdout.String(), tt.flag)
		}
	}
}
