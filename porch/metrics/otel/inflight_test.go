package otel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/writeonce/porch-go/porch/inflight"
	porchotel "github.com/writeonce/porch-go/porch/metrics/otel"
)

// An in-flight limiter's decisions are counted by outcome, and its slots
// held are an up-down counter that Admitted raises and Released lowers.
func TestInflightEventsAreCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range []inflight.Event{inflight.Admitted, inflight.Admitted, inflight.Limited, inflight.Released} {
		m.InflightEvent(ctx, "checkout", e)
	}
	got := collect(t, reader)
	c := counts(t, got, "porch.inflight.requests")
	if c["porch.inflight.limiter=checkout,porch.inflight.outcome=admitted"] != 2 || c["porch.inflight.limiter=checkout,porch.inflight.outcome=limited"] != 1 {
		t.Errorf("porch.inflight.requests: got %v, want 2 admitted and 1 limited", c)
	}
	held, ok := got["porch.inflight.held"].(metricdata.Sum[int64])
	if !ok || held.IsMonotonic || len(held.DataPoints) != 1 || held.DataPoints[0].Value != 1 {
		t.Errorf("porch.inflight.held: got %+v, want one non-monotonic point of 1", got["porch.inflight.held"])
	}
}
