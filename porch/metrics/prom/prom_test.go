package prom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

func TestMetricsExport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := prom.New(reg)
	ctx := context.Background()
	for _, o := range []rate.Outcome{rate.Allowed, rate.Allowed, rate.Limited} {
		m.RateDecision(ctx, "api", o, rate.Verdict{})
	}
	m.RateDecision(ctx, "login", rate.Unavailable, rate.Verdict{})
	for _, o := range []idem.Outcome{idem.Executed, idem.Replayed, idem.Replayed, idem.InFlight} {
		m.IdemOutcome(ctx, o)
	}
	m.PoolRejected()
	m.PoolRejected()
	m.CommitBatch(store.Batch{Writes: 3, Took: 2 * time.Millisecond})
	m.CommitBatch(store.Batch{Writes: 40, Took: 5 * time.Millisecond})
	m.CommitBatch(store.Batch{Writes: 1, Took: time.Second, Err: errors.New("disk full")})

	const want = `
# HELP porch_idem_requests_total Requests with an Idempotency-Key (or lacking a required one), by outcome: executed, replayed, mismatch, in_flight, unavailable, invalid.
# TYPE porch_idem_requests_total counter
porch_idem_requests_total{outcome="executed"} 1
porch_idem_requests_total{outcome="in_flight"} 1
porch_idem_requests_total{outcome="invalid"} 0
porch_idem_requests_total{outcome="mismatch"} 0
porch_idem_requests_total{outcome="replayed"} 2
porch_idem_requests_total{outcome="unavailable"} 0
# HELP porch_pool_rejected_total Jobs the actor pool refused because the key's mailbox was full: requests answered 503.
# TYPE porch_pool_rejected_total counter
porch_pool_rejected_total 2
# HELP porch_rate_requests_total Requests a rate limiter decided, by limiter name and verdict: allowed, limited, unavailable.
# TYPE porch_rate_requests_total counter
porch_rate_requests_total{limiter="api",verdict="allowed"} 2
porch_rate_requests_total{limiter="api",verdict="limited"} 1
porch_rate_requests_total{limiter="api",verdict="unavailable"} 0
porch_rate_requests_total{limiter="login",verdict="allowed"} 0
porch_rate_requests_total{limiter="login",verdict="limited"} 0
porch_rate_requests_total{limiter="login",verdict="unavailable"} 1
# HELP porch_store_commit_errors_total Transactions the stores' group committers failed to commit; every write in them got the error.
# TYPE porch_store_commit_errors_total counter
porch_store_commit_errors_total 1
# HELP porch_store_commits_total Transactions the stores' group committers committed.
# TYPE porch_store_commits_total counter
porch_store_commits_total 2
`
	names := []string{"porch_idem_requests_total", "porch_pool_rejected_total", "porch_rate_requests_total",
		"porch_store_commit_errors_total", "porch_store_commits_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]struct {
		count uint64
		sum   float64
	}{
		"porch_store_commit_seconds": {3, 1.007},
		"porch_store_batch_size":     {3, 44},
	}
	for _, f := range families {
		want, ok := hist[f.GetName()]
		if !ok {
			continue
		}
		delete(hist, f.GetName())
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != want.count || !near(h.GetSampleSum(), want.sum) {
			t.Errorf("%s: got count %d sum %g, want %d and %g", f.GetName(), h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
		}
	}
	for name := range hist {
		t.Errorf("%s: not exported", name)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// Two Metrics in one registry would export the same series twice.
func TestNewPanicsOnASecondMetricsInOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	prom.New(reg)
	defer func() {
		if v := recover(); v == nil || !strings.HasPrefix(v.(string), "prom: ") {
			t.Errorf("got panic %v, want one with a \"prom: \" prefix", v)
		}
	}()
	prom.New(reg)
}

// An unset observer costs nothing; a set one must not allocate per decision
// once its limiter has been seen, since it runs on every request.
func TestCountingDoesNotAllocate(t *testing.T) {
	m := prom.New(prometheus.NewRegistry())
	ctx := context.Background()
	m.RateDecision(ctx, "api", rate.Allowed, rate.Verdict{})
	allocs := testing.AllocsPerRun(100, func() {
		m.RateDecision(ctx, "api", rate.Allowed, rate.Verdict{})
		m.IdemOutcome(ctx, idem.Replayed)
		m.PoolRejected()
		m.CommitBatch(store.Batch{Writes: 3, Took: time.Millisecond})
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per round, want 0", allocs)
	}
}
