//go:build acceptance

package acceptance

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// metricsPrefix starts the stdout line that tells the gate the metrics
// address with -metrics-addr; the storefront prints it before the
// listening line (see sample/storefront/main.go).
const metricsPrefix = "storefront: metrics on "

// metricsURL is the GET /metrics URL a storefront started with
// -metrics-addr printed.
func (s *storefront) metricsURL(t *testing.T) string {
	t.Helper()
	for line := range strings.SplitSeq(s.stdout.String(), "\n") {
		if addr, ok := strings.CutPrefix(line, metricsPrefix); ok {
			return "http://" + strings.TrimSpace(addr) + "/metrics"
		}
	}
	t.Fatalf("no %q line\n%s", metricsPrefix, s.output())
	return ""
}

// scrape reads the storefront's metrics: every sample of the text
// exposition, by its name and labels as written (`a_total{x="y"}`).
func (s *storefront) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	res, err := s.client.Get(s.metricsURL(t))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET /metrics: got %d %s, want 200", res.StatusCode, b)
	}
	samples := make(map[string]float64)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return samples
}

// wantSamples fails for every sample of want that got lacks or holds
// another value of.
func wantSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: not exported", name)
		} else if g != w {
			t.Errorf("%s: got %g, want %g", name, g, w)
		}
	}
}

// With -metrics-addr the storefront serves its metrics at GET /metrics on
// that address, apart from the shop's: the limiter's verdicts, the
// idempotency outcomes and the store's commits, with the values the
// requests made.
func TestMetricsCountWhatTheShopDid(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-metrics-addr", "127.0.0.1:0", "-rate-limit", "5", "-rate-window", "1h")
	for range 3 {
		if r := s.get(t, "/products"); r.Status != http.StatusOK {
			t.Fatalf("GET /products: got %s, want 200", r)
		}
	}
	fresh(t, s.checkout("metrics-1", mugOrder))
	if r := s.checkout("metrics-1", mugOrder); r.Header.Get(replayedHeader) != "true" {
		t.Fatalf("retry: got %s, want a replay", r)
	}
	if r := s.checkout("metrics-2", mugOrder); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the 6th request at a limit of 5: got %s, want 429", r)
	}
	if r := s.get(t, "/metrics"); r.Status != http.StatusNotFound {
		t.Errorf("GET /metrics on the shop's address: got %s, want 404", r)
	}

	got := s.scrape(t)
	wantSamples(t, got, map[string]float64{
		`porch_rate_requests_total{limiter="default",verdict="allowed"}`:     5,
		`porch_rate_requests_total{limiter="default",verdict="limited"}`:     1,
		`porch_rate_requests_total{limiter="default",verdict="unavailable"}`: 0,
		`porch_idem_requests_total{outcome="executed"}`:                      1,
		`porch_idem_requests_total{outcome="replayed"}`:                      1,
		`porch_idem_requests_total{outcome="mismatch"}`:                      0,
		`porch_idem_requests_total{outcome="in_flight"}`:                     0,
		`porch_idem_requests_total{outcome="unavailable"}`:                   0,
		`porch_idem_requests_total{outcome="invalid"}`:                       0,
		`porch_pool_rejected_total`:                                          0,
		`porch_store_commit_errors_total`:                                    0,
	})
	commits := got["porch_store_commits_total"]
	// The first hit of the window, the order with its stored response: at
	// least two commits, and every one in both histograms.
	if commits < 2 {
		t.Errorf("porch_store_commits_total: got %g, want at least 2", commits)
	}
	for _, h := range []string{"porch_store_commit_seconds_count", "porch_store_batch_size_count"} {
		if got[h] != commits {
			t.Errorf("%s: got %g, want porch_store_commits_total (%g)", h, got[h], commits)
		}
	}
	if got["porch_store_batch_size_sum"] < commits {
		t.Errorf("porch_store_batch_size_sum: got %g, want at least one write per commit (%g)", got["porch_store_batch_size_sum"], commits)
	}
	if got[`porch_store_commit_seconds_bucket{le="+Inf"}`] != commits {
		t.Errorf("porch_store_commit_seconds +Inf bucket: got %g, want %g", got[`porch_store_commit_seconds_bucket{le="+Inf"}`], commits)
	}
}

// A saturated pool's refusals are counted: every 503 of a burst on a pool
// of one actor with a one-job mailbox behind a slow disk is a pool
// rejection and an unavailable verdict, and every commit took the disk's
// 200 ms.
func TestMetricsCountSaturation(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-metrics-addr", "127.0.0.1:0",
		"-pool", "1", "-mailbox", "1", "-store-delay", "200ms", "-rate-limit", "1000", "-rate-window", "1h")
	const burst = 20
	s.warm(t, burst)
	codes := statuses(parallel(burst, func(int) reply { return s.try(http.MethodGet, "/products", "") }))
	if codes[http.StatusOK]+codes[http.StatusServiceUnavailable] != burst || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("a burst of %d on a one-job mailbox: got statuses %v, want 200s and at least one 503", burst, codes)
	}
	got := s.scrape(t)
	wantSamples(t, got, map[string]float64{
		`porch_rate_requests_total{limiter="default",verdict="allowed"}`:     float64(codes[http.StatusOK]),
		`porch_rate_requests_total{limiter="default",verdict="unavailable"}`: float64(codes[http.StatusServiceUnavailable]),
		`porch_pool_rejected_total`:                                          float64(codes[http.StatusServiceUnavailable]),
	})
	if n, sum := got["porch_store_commit_seconds_count"], got["porch_store_commit_seconds_sum"]; n == 0 || sum < 0.2*n {
		t.Errorf("porch_store_commit_seconds: got %g commits taking %gs, want at least 200ms each", n, sum)
	}
}
