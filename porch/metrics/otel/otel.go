// Package otel reports what porch's middlewares, pool and stores do to
// OpenTelemetry: a [Metrics] is a porch.PoolObserver, a rate.Observer, an
// inflight.Observer, an idem.Observer, a shed.Observer and a store.Observer. It counts the same outcomes as
// porch/metrics/prom, as OpenTelemetry instruments of the MeterProvider it
// is given, and it writes each decision onto the request's active span, so
// that a trace shows which limiter refused a request or that a response
// was replayed.
// It is the one porch package that links go.opentelemetry.io/otel; the
// framework, the middlewares and the drivers do not.
//
//	m, err := otel.New(nil) // otel.GetMeterProvider(), as set up by the program
//	pool := porch.NewPool(porch.PoolOptions{Observer: m})
//	st, err := sqlite.Open("app.db", sqlite.Options{Options: store.Options{Observer: m}})
//	lim, err := rate.New(pool, st, 100, time.Minute, rate.Options{Name: "api", Observer: m})
//	keys := idem.New(pool, st, idem.Options{Observer: m})
//	r.Use(otelhttp.NewMiddleware("api")) // or any middleware that starts the request's span
//	r.Use(lim.Handler, keys.Handler)
//
// A limiter sets porch.rate.limiter, porch.rate.verdict and
// porch.rate.remaining on the span, the idempotency middleware
// porch.idem.outcome, a load shedder porch.shed.class and
// porch.shed.outcome: only on a span that is recording, and only when the
// middleware that decides runs inside the one that starts the span. The
// instruments and attributes are documented in docs/observability.md.
package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/shed"
	"github.com/writeonce/porch-go/porch/store"
)

// scope is the instrumentation scope of the instruments: by OpenTelemetry's
// convention, the import path of the package that makes them.
const scope = "github.com/writeonce/porch-go/porch/metrics/otel"

// The attribute keys, on the instruments and on the spans alike, so that a
// span and the series it was counted in are found by the same names.
const (
	keyLimiter   = attribute.Key("porch.rate.limiter")
	keyVerdict   = attribute.Key("porch.rate.verdict")
	keyRemaining = attribute.Key("porch.rate.remaining")
	keyOutcome   = attribute.Key("porch.idem.outcome")
	keyInflight  = attribute.Key("porch.inflight.limiter")
	keyInOutcome = attribute.Key("porch.inflight.outcome")
	keyShedClass = attribute.Key("porch.shed.class")
	keyShedOut   = attribute.Key("porch.shed.outcome")
)

// Histogram boundaries, as porch/metrics/prom's buckets: a commit is one
// fsync (SQLite) or one round trip (PostgreSQL), tenths of a millisecond on
// a fast disk and seconds on a failing one; a batch holds at most
// store.Options.MaxBatch (4096 by default) writes.
var (
	commitSecondsBounds = exponential(0.0001, 16) // 100µs to 3.3s
	batchSizeBounds     = exponential(1, 13)      // 1 to 4096
)

// exponential returns n boundaries from start, each twice the one before.
func exponential(start float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= 2
	}
	return b
}

// Metrics is porch's metrics as OpenTelemetry instruments, and its
// decisions as attributes of the requests' spans. Pass it as the Observer
// of porch.PoolOptions, rate.Options, idem.Options, shed.Options and
// store.Options. Several limiters, shedders and stores may share it:
// limiters are told apart by their name; the shedders' and the stores'
// counts add up.
//
// Create it with [New]; the zero value is not usable. It is safe for
// concurrent use.
type Metrics struct {
	rate          metric.Int64Counter
	idemRequests  metric.Int64Counter
	idem          [idem.Invalid + 1]decision // indexed by outcome
	commits       metric.Int64Counter
	commitErrors  metric.Int64Counter
	commitSeconds metric.Float64Histogram
	batchSize     metric.Int64Histogram
	poolRejected  metric.Int64Counter
	shedRequests  metric.Int64Counter
	shed          [2][2]decision // by class (not critical, critical), then admitted, refused
	shedInFlight  metric.Int64UpDownCounter

	inflight     metric.Int64Counter
	inflightHeld metric.Int64UpDownCounter

	mu        sync.RWMutex // protects limiters and inflights
	limiters  map[string]*[rate.Unavailable + 1]decision
	inflights map[string]*[inflight.Released + 1]decision // Released: the held series' attributes
}

// decision is what one outcome adds to a counter and to a span, made once
// per outcome (and limiter) so that counting it does not build attribute
// sets per request.
type decision struct {
	add   []metric.AddOption
	attrs []attribute.KeyValue
}

func newDecision(kvs ...attribute.KeyValue) decision {
	return decision{
		add:   []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))},
		attrs: kvs,
	}
}

var (
	_ porch.PoolObserver = (*Metrics)(nil)
	_ rate.Observer      = (*Metrics)(nil)
	_ inflight.Observer  = (*Metrics)(nil)
	_ idem.Observer      = (*Metrics)(nil)
	_ shed.Observer      = (*Metrics)(nil)
	_ store.Observer     = (*Metrics)(nil)
)

var (
	rateOutcomes = []rate.Outcome{rate.Allowed, rate.Limited, rate.Unavailable}
	idemOutcomes = []idem.Outcome{idem.Executed, idem.Replayed, idem.Mismatch,
		idem.InFlight, idem.Unavailable, idem.Invalid}
)

// New makes porch's instruments on a meter of mp, or of
// otel.GetMeterProvider() if mp is nil. It fails only if mp refuses an
// instrument.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scope)
	m := &Metrics{limiters: make(map[string]*[rate.Unavailable + 1]decision),
		inflights: make(map[string]*[inflight.Released + 1]decision)}
	var err error
	if m.rate, err = meter.Int64Counter("porch.rate.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a rate limiter decided, by limiter name and verdict: allowed, limited, unavailable.")); err != nil {
		return nil, err
	}
	idemRequests, err := meter.Int64Counter("porch.idem.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests with an Idempotency-Key (or lacking a required one), by outcome: executed, replayed, mismatch, in_flight, unavailable, invalid."))
	if err != nil {
		return nil, err
	}
	if m.commits, err = meter.Int64Counter("porch.store.commits", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions the stores' group committers committed.")); err != nil {
		return nil, err
	}
	if m.commitErrors, err = meter.Int64Counter("porch.store.commit_errors", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions the stores' group committers failed to commit; every write in them got the error.")); err != nil {
		return nil, err
	}
	if m.commitSeconds, err = meter.Float64Histogram("porch.store.commit.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to make one batch durable, committed or failed."),
		metric.WithExplicitBucketBoundaries(commitSecondsBounds...)); err != nil {
		return nil, err
	}
	if m.batchSize, err = meter.Int64Histogram("porch.store.batch.size", metric.WithUnit("{write}"),
		metric.WithDescription("Writes one transaction of a group committer carried, committed or failed."),
		metric.WithExplicitBucketBoundaries(batchSizeBounds...)); err != nil {
		return nil, err
	}
	if m.poolRejected, err = meter.Int64Counter("porch.pool.rejected", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs the actor pool refused because the key's mailbox was full: requests answered 503.")); err != nil {
		return nil, err
	}
	if m.inflight, err = meter.Int64Counter("porch.inflight.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests an in-flight limiter decided, by limiter name and outcome: admitted, limited, unavailable.")); err != nil {
		return nil, err
	}
	if m.inflightHeld, err = meter.Int64UpDownCounter("porch.inflight.held", metric.WithUnit("{request}"),
		metric.WithDescription("Slots an in-flight limiter holds in this process: its requests running now.")); err != nil {
		return nil, err
	}
	if m.shedRequests, err = meter.Int64Counter("porch.shed.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a load shedder decided, by class (critical, non_critical) and outcome (admitted, refused).")); err != nil {
		return nil, err
	}
	if m.shedInFlight, err = meter.Int64UpDownCounter("porch.shed.in_flight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the load shedders have admitted and not yet released.")); err != nil {
		return nil, err
	}
	for c, class := range []string{"non_critical", "critical"} {
		m.shed[c][0] = newDecision(keyShedClass.String(class), keyShedOut.String(shed.Admitted.String()))
		m.shed[c][1] = newDecision(keyShedClass.String(class), keyShedOut.String(shed.Refused.String()))
	}
	m.idemRequests = idemRequests
	for _, o := range idemOutcomes {
		m.idem[o] = newDecision(keyOutcome.String(o.String()))
	}
	return m, nil
}

// RateDecision counts a limiter's verdict in porch.rate.requests, and sets
// the limiter, the verdict and, when there is a count to report, what the
// key has left on the request's span. What is left is a span attribute only: on
// the counter it would make a series per value. When several limiters
// decide one request, the span keeps the last decision.
func (m *Metrics) RateDecision(ctx context.Context, limiter string, o rate.Outcome, v rate.Verdict) {
	if o < rate.Allowed || o > rate.Unavailable {
		return
	}
	d := &m.limiter(limiter)[o]
	// The request's context carries its trace, which the SDK samples
	// exemplars from: the count links to the span it was made in.
	m.rate.Add(ctx, 1, d.add...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(d.attrs...)
		if o != rate.Unavailable { // no verdict was reached: nothing counted to report
			span.SetAttributes(keyRemaining.Int64(v.Remaining))
		}
	}
}

// limiter returns what each of limiter's verdicts adds, making it the
// first time.
func (m *Metrics) limiter(name string) *[rate.Unavailable + 1]decision {
	m.mu.RLock()
	ds, ok := m.limiters[name]
	m.mu.RUnlock()
	if ok {
		return ds
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ds, ok := m.limiters[name]; ok {
		return ds
	}
	ds = new([rate.Unavailable + 1]decision)
	for _, o := range rateOutcomes {
		ds[o] = newDecision(keyLimiter.String(name), keyVerdict.String(o.String()))
	}
	m.limiters[name] = ds
	return ds
}

// InflightEvent counts an in-flight limiter's decision in
// porch.inflight.requests and sets it on the request's span, and moves
// porch.inflight.held with Admitted and Released.
func (m *Metrics) InflightEvent(ctx context.Context, limiter string, e inflight.Event) {
	if e < inflight.Admitted || e > inflight.Released {
		return
	}
	ds := m.inflightOf(limiter)
	switch e {
	case inflight.Admitted:
		m.inflightHeld.Add(ctx, 1, ds[inflight.Released].add...)
	case inflight.Released:
		m.inflightHeld.Add(ctx, -1, ds[inflight.Released].add...)
		return
	}
	d := &ds[e]
	m.inflight.Add(ctx, 1, d.add...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(d.attrs...)
	}
}

// inflightOf returns an in-flight limiter's attribute sets, making them
// the first time.
func (m *Metrics) inflightOf(name string) *[inflight.Released + 1]decision {
	m.mu.RLock()
	ds, ok := m.inflights[name]
	m.mu.RUnlock()
	if ok {
		return ds
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ds, ok := m.inflights[name]; ok {
		return ds
	}
	ds = new([inflight.Released + 1]decision)
	for _, e := range []inflight.Event{inflight.Admitted, inflight.Limited, inflight.Unavailable} {
		ds[e] = newDecision(keyInflight.String(name), keyInOutcome.String(e.String()))
	}
	ds[inflight.Released] = newDecision(keyInflight.String(name))
	m.inflights[name] = ds
	return ds
}

// IdemOutcome counts an outcome in porch.idem.requests, and sets it on the
// request's span.
func (m *Metrics) IdemOutcome(ctx context.Context, o idem.Outcome) {
	if o < idem.Executed || o > idem.Invalid {
		return
	}
	d := &m.idem[o]
	m.idemRequests.Add(ctx, 1, d.add...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(d.attrs...)
	}
}

// ShedEvent counts an admission or a refusal in porch.shed.requests and
// sets the class and the outcome on the request's span, and keeps
// porch.shed.in_flight: up on an admission, down on a release.
func (m *Metrics) ShedEvent(ctx context.Context, e shed.Event, critical bool) {
	c := 0
	if critical {
		c = 1
	}
	var d *decision
	switch e {
	case shed.Admitted:
		d = &m.shed[c][0]
		m.shedInFlight.Add(ctx, 1)
	case shed.Refused:
		d = &m.shed[c][1]
	case shed.Released:
		m.shedInFlight.Add(ctx, -1)
		return
	default:
		return
	}
	m.shedRequests.Add(ctx, 1, d.add...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(d.attrs...)
	}
}

// PoolRejected counts a refusal in porch.pool.rejected. The pool is not
// told which request it refused: the request's span gets the middleware's
// unavailable verdict or outcome instead.
func (m *Metrics) PoolRejected() { m.poolRejected.Add(context.Background(), 1) }

// CommitBatch counts a batch in porch.store.commits or
// porch.store.commit_errors, and its time and size in
// porch.store.commit.duration and porch.store.batch.size. A batch carries
// the writes of many requests, so it is on no request's span.
func (m *Metrics) CommitBatch(b store.Batch) {
	ctx := context.Background()
	if b.Err != nil {
		m.commitErrors.Add(ctx, 1)
	} else {
		m.commits.Add(ctx, 1)
	}
	m.commitSeconds.Record(ctx, b.Took.Seconds())
	m.batchSize.Record(ctx, int64(b.Writes))
}
