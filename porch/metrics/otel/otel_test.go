package otel_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/kit"
	porchotel "github.com/writeonce/porch-go/porch/metrics/otel"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// rig is a limiter of 4 requests a minute in front of an idempotency
// middleware, on a SQLite store, observed by one Metrics that reports to an
// in-memory metric reader and span recorder.
type rig struct {
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	clk     *porchtest.FakeClock
	st      *sqlite.Store
	kit     *kit.Kit
	handler http.Handler
}

// stepHeader names the span the test middleware starts for a request, so
// that the test finds each request's span among those recorded.
const stepHeader = "Test-Step"

func newRig(t *testing.T) *rig {
	t.Helper()
	rg := &rig{
		reader: sdkmetric.NewManualReader(),
		spans:  tracetest.NewSpanRecorder(),
		clk:    porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC)),
	}
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rg.reader)))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler) // the store failure below is on purpose
	rg.st, err = sqlite.Open(filepath.Join(t.TempDir(), "app.db"), sqlite.Options{Options: store.Options{Clock: rg.clk, Observer: m, Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	rg.kit = kit.New(porch.NewPool(porch.PoolOptions{Observer: m}), rg.st, rg.st)
	t.Cleanup(func() { rg.kit.Close(context.Background()) })
	lim, err := rg.kit.Limiter(4, time.Minute, rate.Options{Name: "api", Observer: m, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	keys := rg.kit.Idempotency(idem.Options{Observer: m, Logger: quiet})

	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rg.spans)).Tracer("test")
	r := chi.NewRouter()
	// The span is started outside the limiter, as a tracing middleware
	// mounted first would start it.
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := tracer.Start(r.Context(), r.Header.Get(stepHeader))
			defer span.End()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	})
	r.Use(lim.Handler)
	r.With(keys.Handler).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"order":1}`)
	})
	rg.handler = r
	return rg
}

// post serves one POST /orders, its span named step.
func (rg *rig) post(t *testing.T, step, key, body string, want int) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	req.Header.Set(stepHeader, step)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	rg.handler.ServeHTTP(rec, req)
	if rec.Code != want {
		t.Fatalf("%s: got status %d (%s), want %d", step, rec.Code, rec.Body, want)
	}
}

// Every outcome of real requests is counted under its attributes, and is
// set on the span the request was served in.
func TestRequestsAreCountedAndSetOnTheirSpans(t *testing.T) {
	rg := newRig(t)
	rg.post(t, "executed", "k1", "tea", http.StatusCreated)
	rg.post(t, "replayed", "k1", "tea", http.StatusCreated)
	rg.post(t, "mismatch", "k1", "coffee", http.StatusUnprocessableEntity)
	rg.post(t, "invalid", `"k2", "k3"`, "tea", http.StatusBadRequest)
	rg.post(t, "limited", "k4", "tea", http.StatusTooManyRequests)
	// A new window, and a store that fails every write: the hit is not
	// durable, so the request is refused as unavailable.
	rg.clk.Advance(time.Minute)
	if _, err := rg.st.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	rg.post(t, "unavailable", "k5", "tea", http.StatusServiceUnavailable)

	want := map[string]map[string]string{
		"executed": {"porch.rate.limiter": "api", "porch.rate.verdict": "allowed", "porch.rate.remaining": "3", "porch.idem.outcome": "executed"},
		"replayed": {"porch.rate.limiter": "api", "porch.rate.verdict": "allowed", "porch.rate.remaining": "2", "porch.idem.outcome": "replayed"},
		"mismatch": {"porch.rate.limiter": "api", "porch.rate.verdict": "allowed", "porch.rate.remaining": "1", "porch.idem.outcome": "mismatch"},
		"invalid":  {"porch.rate.limiter": "api", "porch.rate.verdict": "allowed", "porch.rate.remaining": "0", "porch.idem.outcome": "invalid"},
		"limited":  {"porch.rate.limiter": "api", "porch.rate.verdict": "limited", "porch.rate.remaining": "0"},
		// No verdict was reached, so there is no count to report.
		"unavailable": {"porch.rate.limiter": "api", "porch.rate.verdict": "unavailable"},
	}
	spans := rg.spans.Ended()
	if len(spans) != len(want) {
		t.Errorf("got %d spans, want %d", len(spans), len(want))
	}
	for _, s := range spans {
		if got := porchAttrs(s.Attributes()); !maps.Equal(got, want[s.Name()]) {
			t.Errorf("span %q: got attributes %v, want %v", s.Name(), got, want[s.Name()])
		}
	}

	// Closed, so that every batch, the last failing ones included, has
	// been told before the reading.
	rg.kit.Close(context.Background())
	got := collect(t, rg.reader)
	wantCounts := map[string]map[string]int64{
		"porch.rate.requests": {
			"porch.rate.limiter=api,porch.rate.verdict=allowed":     4,
			"porch.rate.limiter=api,porch.rate.verdict=limited":     1,
			"porch.rate.limiter=api,porch.rate.verdict=unavailable": 1,
		},
		"porch.idem.requests": {
			"porch.idem.outcome=executed": 1,
			"porch.idem.outcome=replayed": 1,
			"porch.idem.outcome=mismatch": 1,
			"porch.idem.outcome=invalid":  1,
		},
	}
	for name, want := range wantCounts {
		if got := counts(t, got, name); !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	commits := counts(t, got, "porch.store.commits")[""]
	failed := counts(t, got, "porch.store.commit_errors")[""]
	if commits < 1 || failed < 1 {
		t.Errorf("got %d commits and %d failed, want at least one of each", commits, failed)
	}
	// Every batch, committed or failed, is timed and sized once.
	for _, name := range []string{"porch.store.commit.duration", "porch.store.batch.size"} {
		if n := histogramCount(t, got, name); n != uint64(commits+failed) {
			t.Errorf("%s: got %d batches, want %d", name, n, commits+failed)
		}
	}
	if _, ok := got["porch.pool.rejected"]; ok {
		t.Errorf("porch.pool.rejected: reported with no refusal")
	}
}

// A refusal for a full mailbox is counted; the pool does not say which
// request it refused, so it needs no context.
func TestPoolRejectedIsCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	m.PoolRejected()
	m.PoolRejected()
	if got := counts(t, collect(t, reader), "porch.pool.rejected")[""]; got != 2 {
		t.Errorf("got %d, want 2", got)
	}
}

// A decision on a request without a recording span, or outside any
// request (Limiter.Allow), is counted and touches no span.
func TestDecisionWithoutSpanIsCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	for _, ctx := range []context.Context{context.Background(), trace.ContextWithRemoteSpanContext(context.Background(), sc)} {
		m.RateDecision(ctx, "api", rate.Allowed, rate.Verdict{Allowed: true, Remaining: 1})
		m.IdemOutcome(ctx, idem.Executed)
	}
	got := collect(t, reader)
	if n := counts(t, got, "porch.rate.requests")["porch.rate.limiter=api,porch.rate.verdict=allowed"]; n != 2 {
		t.Errorf("porch.rate.requests: got %d, want 2", n)
	}
	if n := counts(t, got, "porch.idem.requests")["porch.idem.outcome=executed"]; n != 2 {
		t.Errorf("porch.idem.requests: got %d, want 2", n)
	}
}

// porchAttrs is the porch.* attributes of a span, their values as text.
func porchAttrs(kvs []attribute.KeyValue) map[string]string {
	got := map[string]string{}
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), "porch.") {
			got[string(kv.Key)] = kv.Value.Emit()
		}
	}
	return got
}

// collect reads every instrument of the reader, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/writeonce/porch-go/porch/metrics/otel" {
			t.Errorf("got instrumentation scope %q, want the package's import path", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

// counts is a monotonic int64 sum's points, keyed by their attributes as
// "k=v,k=v" in key order ("" for none).
func counts(t *testing.T, got map[string]metricdata.Aggregation, name string) map[string]int64 {
	t.Helper()
	sum, ok := got[name].(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s: got %T, want a monotonic int64 sum", name, got[name])
	}
	points := map[string]int64{}
	for _, p := range sum.DataPoints {
		var kv []string
		for _, a := range p.Attributes.ToSlice() { // sorted by key
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		points[strings.Join(kv, ",")] = p.Value
	}
	return points
}

// histogramCount is how many values a histogram without attributes holds.
func histogramCount(t *testing.T, got map[string]metricdata.Aggregation, name string) uint64 {
	t.Helper()
	var points []uint64
	switch h := got[name].(type) {
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			points = append(points, p.Count)
		}
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			points = append(points, p.Count)
		}
	default:
		t.Fatalf("%s: got %T, want a histogram", name, got[name])
	}
	if len(points) != 1 {
		t.Fatalf("%s: got %d points, want 1", name, len(points))
	}
	return slices.Max(points)
}

// Unlike two prom.Metrics in one registry, two Metrics on one
// MeterProvider are not an error: they count into the same instruments.
func TestTwoMetricsOnOneProviderShareInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	for range 2 {
		m, err := porchotel.New(mp)
		if err != nil {
			t.Fatal(err)
		}
		m.RateDecision(context.Background(), "api", rate.Allowed, rate.Verdict{Allowed: true, Remaining: 1})
	}
	if n := counts(t, collect(t, reader), "porch.rate.requests")["porch.rate.limiter=api,porch.rate.verdict=allowed"]; n != 2 {
		t.Errorf("got %d, want 2", n)
	}
}

// Observing runs on every request: once a limiter has been seen, counting
// must not allocate where no span is recording (a recording span copies
// its attributes anyway).
func TestCountingDoesNotAllocate(t *testing.T) {
	m, err := porchotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	round := func() {
		m.RateDecision(ctx, "api", rate.Allowed, rate.Verdict{Allowed: true, Remaining: 1})
		m.IdemOutcome(ctx, idem.Replayed)
		m.PoolRejected()
		m.CommitBatch(store.Batch{Writes: 3, Took: time.Millisecond})
	}
	round() // the limiter's and every series' first time
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("got %v allocations per round, want 0", allocs)
	}
}
