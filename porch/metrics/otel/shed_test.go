package otel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	porchotel "github.com/writeonce/porch-go/porch/metrics/otel"
	"github.com/writeonce/porch-go/porch/shed"
)

// A shedder's admissions and refusals are counted by class and set on
// the request's span; its requests in flight are admissions less
// releases.
func TestShedEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	ctx, span := tp.Tracer("test").Start(context.Background(), "refused")
	m.ShedEvent(ctx, shed.Refused, false)
	span.End()
	bg := context.Background()
	m.ShedEvent(bg, shed.Admitted, true)
	m.ShedEvent(bg, shed.Admitted, false)
	m.ShedEvent(bg, shed.Released, false)
	m.ShedEvent(bg, shed.Admitted, true)

	got := collect(t, reader)
	wantCounts := map[string]int64{
		"porch.shed.class=critical,porch.shed.outcome=admitted":     2,
		"porch.shed.class=non_critical,porch.shed.outcome=admitted": 1,
		"porch.shed.class=non_critical,porch.shed.outcome=refused":  1,
	}
	c := counts(t, got, "porch.shed.requests")
	for k, w := range wantCounts {
		if c[k] != w {
			t.Errorf("porch.shed.requests %s: got %d, want %d", k, c[k], w)
		}
	}
	sum, ok := got["porch.shed.in_flight"].(metricdata.Sum[int64])
	if !ok || sum.IsMonotonic || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 2 {
		t.Errorf("porch.shed.in_flight: got %+v, want a non-monotonic sum of 2", got["porch.shed.in_flight"])
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("got %d spans, want 1", len(ended))
	}
	attrs := porchAttrs(ended[0].Attributes())
	if attrs["porch.shed.class"] != "non_critical" || attrs["porch.shed.outcome"] != "refused" {
		t.Errorf("span attributes: got %v, want the refusal's class and outcome", attrs)
	}
}
