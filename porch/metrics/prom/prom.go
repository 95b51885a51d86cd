// Package prom counts what porch's middlewares, pool and stores do as
// Prometheus metrics: a [Metrics] is a porch.PoolObserver, a rate.Observer,
// an inflight.Observer, an idem.Observer, a shed.Observer and a store.Observer.
// It is the one porch package that links
// github.com/prometheus/client_golang; the framework, the middlewares and
// the drivers do not.
//
//	reg := prometheus.NewRegistry()
//	m := prom.New(reg)
//	pool := porch.NewPool(porch.PoolOptions{Observer: m})
//	st, err := sqlite.Open("app.db", sqlite.Options{Options: store.Options{Observer: m}})
//	lim, err := rate.New(pool, st, 100, time.Minute, rate.Options{Observer: m})
//	keys := idem.New(pool, st, idem.Options{Observer: m})
//	go http.ListenAndServe("127.0.0.1:9090", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The series are documented in docs/observability.md.
package prom

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/shed"
	"github.com/writeonce/porch-go/porch/store"
)

// The histograms' buckets, as New documents them.
var (
	commitSecondsBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16) // 100µs to 3.3s
	batchSizeBuckets     = prometheus.ExponentialBuckets(1, 2, 13)      // 1 to 4096
)

// Metrics is porch's metrics in one Prometheus registry. Pass it as the
// Observer of porch.PoolOptions, rate.Options, idem.Options, shed.Options
// and store.Options. Several limiters, shedders and stores may share it:
// limiters are told apart by their name; the shedders' and the stores'
// series add up.
//
// Create it with [New]; the zero value is not usable. It is safe for
// concurrent use, and counting a decision does not allocate once its
// limiter has been seen.
type Metrics struct {
	rate          *prometheus.CounterVec
	idem          [idem.Invalid + 1]prometheus.Counter // indexed by outcome
	commits       prometheus.Counter
	commitErrors  prometheus.Counter
	commitSeconds prometheus.Histogram
	batchSize     prometheus.Histogram
	poolRejected  prometheus.Counter
	shed          [2][2]prometheus.Counter // by class (not critical, critical), then admitted, refused
	shedInFlight  prometheus.Gauge

	inflight     *prometheus.CounterVec
	inflightHeld *prometheus.GaugeVec

	mu        sync.RWMutex // protects limiters and inflights
	limiters  map[string]*[rate.Unavailable + 1]prometheus.Counter
	inflights map[string]*inflightSeries
}

// inflightSeries are one in-flight limiter's series: its decisions by
// event (Released unused) and its slots held.
type inflightSeries struct {
	events [inflight.Released]prometheus.Counter
	held   prometheus.Gauge
}

var (
	_ porch.PoolObserver = (*Metrics)(nil)
	_ rate.Observer      = (*Metrics)(nil)
	_ inflight.Observer  = (*Metrics)(nil)
	_ idem.Observer      = (*Metrics)(nil)
	_ shed.Observer      = (*Metrics)(nil)
	_ store.Observer     = (*Metrics)(nil)
)

// rateOutcomes and idemOutcomes are every outcome, so that each series is
// exported from zero rather than appearing at its first event.
var (
	rateOutcomes = []rate.Outcome{rate.Allowed, rate.Limited, rate.Unavailable}
	idemOutcomes = []idem.Outcome{idem.Executed, idem.Replayed, idem.Mismatch,
		idem.InFlight, idem.Unavailable, idem.Invalid}
)

// New makes porch's metrics and registers them with reg, or with
// prometheus.DefaultRegisterer if reg is nil. Like
// prometheus.MustRegister, it panics if reg already holds metrics of these
// names: two Metrics cannot share a registry.
//
// The histograms' buckets are fixed, each bound twice the one before:
// porch_store_commit_seconds from 100 µs to 3.3 s (16 bounds), as a
// commit is one fsync (SQLite) or one round trip (PostgreSQL, Redis),
// tenths of a millisecond on a fast disk and seconds on a failing one;
// porch_store_batch_size from 1 to 4096 writes (13 bounds), as a batch
// holds at most store.Options.MaxBatch (4096 by default).
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	idem := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porch_idem_requests_total",
		Help: "Requests with an Idempotency-Key (or lacking a required one), by outcome: executed, replayed, mismatch, in_flight, unavailable, invalid.",
	}, []string{"outcome"})
	m := &Metrics{
		rate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "porch_rate_requests_total",
			Help: "Requests a rate limiter decided, by limiter name and verdict: allowed, limited, unavailable.",
		}, []string{"limiter", "verdict"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "porch_store_commits_total",
			Help: "Transactions the stores' group committers committed.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "porch_store_commit_errors_total",
			Help: "Transactions the stores' group committers failed to commit; every write in them got the error.",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "porch_store_commit_seconds",
			Help:    "Time to make one batch durable, committed or failed.",
			Buckets: commitSecondsBuckets,
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "porch_store_batch_size",
			Help:    "Writes one transaction of a group committer carried, committed or failed.",
			Buckets: batchSizeBuckets,
		}),
		poolRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "porch_pool_rejected_total",
			Help: "Jobs the actor pool refused because the key's mailbox was full: requests answered 503.",
		}),
		inflight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "porch_inflight_requests_total",
			Help: "Requests an in-flight limiter decided, by limiter name and outcome: admitted, limited, unavailable.",
		}, []string{"limiter", "outcome"}),
		inflightHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "porch_inflight_held",
			Help: "Slots an in-flight limiter holds in this process: its requests running now.",
		}, []string{"limiter"}),
		shedInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "porch_shed_in_flight",
			Help: "Requests the load shedders have admitted and not yet released.",
		}),
		limiters:  make(map[string]*[rate.Unavailable + 1]prometheus.Counter),
		inflights: make(map[string]*inflightSeries),
	}
	shedRequests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porch_shed_requests_total",
		Help: "Requests a load shedder decided, by class (critical, non_critical) and outcome (admitted, refused).",
	}, []string{"class", "outcome"})
	for _, o := range idemOutcomes {
		m.idem[o] = idem.WithLabelValues(o.String())
	}
	for c, class := range shedClasses {
		m.shed[c][0] = shedRequests.WithLabelValues(class, shed.Admitted.String())
		m.shed[c][1] = shedRequests.WithLabelValues(class, shed.Refused.String())
	}
	for _, c := range []prometheus.Collector{m.rate, m.inflight, m.inflightHeld, idem, m.commits, m.commitErrors, m.commitSeconds, m.batchSize, m.poolRejected,
		shedRequests, m.shedInFlight} {
		if err := reg.Register(c); err != nil {
			panic("prom: New: " + err.Error())
		}
	}
	return m
}

// RateDecision counts a limiter's verdict in porch_rate_requests_total.
// remaining is not exported: a gauge per key would be a series per client.
func (m *Metrics) RateDecision(_ context.Context, limiter string, o rate.Outcome, _ rate.Verdict) {
	if o < rate.Allowed || o > rate.Unavailable {
		return
	}
	m.limiter(limiter)[o].Inc()
}

// limiter returns the counters of limiter's verdicts, making them (from
// zero, every verdict) the first time.
func (m *Metrics) limiter(name string) *[rate.Unavailable + 1]prometheus.Counter {
	m.mu.RLock()
	cs, ok := m.limiters[name]
	m.mu.RUnlock()
	if ok {
		return cs
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cs, ok := m.limiters[name]; ok {
		return cs
	}
	cs = new([rate.Unavailable + 1]prometheus.Counter)
	for _, o := range rateOutcomes {
		cs[o] = m.rate.WithLabelValues(name, o.String())
	}
	m.limiters[name] = cs
	return cs
}

// InflightEvent counts an in-flight limiter's decision in
// porch_inflight_requests_total, and moves porch_inflight_held with
// Admitted and Released.
func (m *Metrics) InflightEvent(_ context.Context, limiter string, e inflight.Event) {
	if e < inflight.Admitted || e > inflight.Released {
		return
	}
	ss := m.inflightOf(limiter)
	switch e {
	case inflight.Admitted:
		ss.held.Inc()
	case inflight.Released:
		ss.held.Dec()
		return
	}
	ss.events[e].Inc()
}

// inflightOf returns the series of an in-flight limiter, making them
// (from zero, every outcome) the first time.
func (m *Metrics) inflightOf(name string) *inflightSeries {
	m.mu.RLock()
	ss, ok := m.inflights[name]
	m.mu.RUnlock()
	if ok {
		return ss
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ss, ok := m.inflights[name]; ok {
		return ss
	}
	ss = &inflightSeries{held: m.inflightHeld.WithLabelValues(name)}
	for _, e := range []inflight.Event{inflight.Admitted, inflight.Limited, inflight.Unavailable} {
		ss.events[e] = m.inflight.WithLabelValues(name, e.String())
	}
	m.inflights[name] = ss
	return ss
}

// IdemOutcome counts an outcome in porch_idem_requests_total.
func (m *Metrics) IdemOutcome(_ context.Context, o idem.Outcome) {
	if o < idem.Executed || o > idem.Invalid {
		return
	}
	m.idem[o].Inc()
}

// shedClasses labels a shed.Observer's class: not critical, critical.
var shedClasses = [2]string{"non_critical", "critical"}

// ShedEvent counts an admission or a refusal in porch_shed_requests_total,
// and keeps porch_shed_in_flight: up on an admission, down on a release.
func (m *Metrics) ShedEvent(_ context.Context, e shed.Event, critical bool) {
	c := 0
	if critical {
		c = 1
	}
	switch e {
	case shed.Admitted:
		m.shed[c][0].Inc()
		m.shedInFlight.Inc()
	case shed.Refused:
		m.shed[c][1].Inc()
	case shed.Released:
		m.shedInFlight.Dec()
	}
}

// PoolRejected counts a refusal in porch_pool_rejected_total.
func (m *Metrics) PoolRejected() { m.poolRejected.Inc() }

// CommitBatch counts a batch: in porch_store_commits_total or
// porch_store_commit_errors_total, and its time and size in
// porch_store_commit_seconds and porch_store_batch_size.
func (m *Metrics) CommitBatch(b store.Batch) {
	if b.Err != nil {
		m.commitErrors.Inc()
	} else {
		m.commits.Inc()
	}
	m.commitSeconds.Observe(b.Took.Seconds())
	m.batchSize.Observe(float64(b.Writes))
}
