package otel_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/writeonce/porch-go/porch"
	porchotel "github.com/writeonce/porch-go/porch/metrics/otel"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// One Metrics observes the pool, the store and the limiter. A program
// passes its own MeterProvider (or nil for the global one) with an
// exporter; here an in-memory reader shows the counts, and a span
// recorder the attributes a decision leaves on the span it was made in.
func Example() {
	dir, _ := os.MkdirTemp("", "porch-otel-example")
	defer os.RemoveAll(dir)

	reader := sdkmetric.NewManualReader()
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	pool := porch.NewPool(porch.PoolOptions{Observer: m})
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Observer: m}})
	if err != nil {
		panic(err)
	}
	lim, err := rate.New(pool, st, 2, time.Minute, rate.Options{Name: "api", Observer: m})
	if err != nil {
		panic(err)
	}

	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("example")
	for range 3 {
		ctx, span := tracer.Start(context.Background(), "charge")
		lim.Allow(ctx, "alice")
		span.End()
	}
	lim.Close(context.Background())
	pool.Close(context.Background())
	st.Close(context.Background())

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != "porch.rate.requests" {
				continue
			}
			var lines []string
			for _, p := range mt.Data.(metricdata.Sum[int64]).DataPoints {
				verdict, _ := p.Attributes.Value("porch.rate.verdict")
				lines = append(lines, fmt.Sprintf("%s{verdict=%s} %d", mt.Name, verdict.Emit(), p.Value))
			}
			slices.Sort(lines) // a reader's points come in no set order
			for _, l := range lines {
				fmt.Println(l)
			}
		}
	}
	last := spans.Ended()[2]
	for _, kv := range last.Attributes() {
		fmt.Printf("span %s: %s=%s\n", last.Name(), kv.Key, kv.Value.Emit())
	}
	// Output:
	// porch.rate.requests{verdict=allowed} 2
	// porch.rate.requests{verdict=limited} 1
	// span charge: porch.rate.limiter=api
	// span charge: porch.rate.verdict=limited
	// span charge: porch.rate.remaining=0
}
