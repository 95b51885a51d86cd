package prom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/shed"
)

// A shedder's admissions and refusals are counted by class, and its
// requests in flight are admissions less releases.
func TestShedEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := prom.New(reg)
	ctx := context.Background()
	for _, ev := range []struct {
		e        shed.Event
		critical bool
	}{
		{shed.Admitted, false}, {shed.Admitted, true}, {shed.Admitted, true},
		{shed.Refused, false}, {shed.Refused, false}, {shed.Refused, true},
		{shed.Released, true},
	} {
		m.ShedEvent(ctx, ev.e, ev.critical)
	}
	const want = `
# HELP porch_shed_in_flight Requests the load shedders have admitted and not yet released.
# TYPE porch_shed_in_flight gauge
porch_shed_in_flight 2
# HELP porch_shed_requests_total Requests a load shedder decided, by class (critical, non_critical) and outcome (admitted, refused).
# TYPE porch_shed_requests_total counter
porch_shed_requests_total{class="critical",outcome="admitted"} 2
porch_shed_requests_total{class="critical",outcome="refused"} 1
porch_shed_requests_total{class="non_critical",outcome="admitted"} 1
porch_shed_requests_total{class="non_critical",outcome="refused"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "porch_shed_in_flight", "porch_shed_requests_total"); err != nil {
		t.Error(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		m.ShedEvent(ctx, shed.Admitted, true)
		m.ShedEvent(ctx, shed.Released, true)
		m.ShedEvent(ctx, shed.Refused, false)
	}); allocs != 0 {
		t.Errorf("got %v allocations per round, want 0", allocs)
	}
}
