package prom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/metrics/prom"
)

// An in-flight limiter's decisions are counted by outcome, and its slots
// held are a gauge that Admitted raises and Released lowers.
func TestInflightExport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := prom.New(reg)
	ctx := context.Background()
	for _, e := range []inflight.Event{inflight.Admitted, inflight.Admitted, inflight.Limited, inflight.Released, inflight.Unavailable} {
		m.InflightEvent(ctx, "checkout", e)
	}
	const want = `
# HELP porch_inflight_held Slots an in-flight limiter holds in this process: its requests running now.
# TYPE porch_inflight_held gauge
porch_inflight_held{limiter="checkout"} 1
# HELP porch_inflight_requests_total Requests an in-flight limiter decided, by limiter name and outcome: admitted, limited, unavailable.
# TYPE porch_inflight_requests_total counter
porch_inflight_requests_total{limiter="checkout",outcome="admitted"} 2
porch_inflight_requests_total{limiter="checkout",outcome="limited"} 1
porch_inflight_requests_total{limiter="checkout",outcome="unavailable"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "porch_inflight_held", "porch_inflight_requests_total"); err != nil {
		t.Error(err)
	}
}
