package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/writeonce/porch-go/porch/metrics/prom"
)

// metricsServer serves porch's metrics, with the Go runtime's and the
// process's, at GET /metrics on an address of its own (-metrics-addr), so
// that the shop's rate limiter and connection cap never stand between a
// scraper and them. It owns its serving goroutine; Close joins it.
type metricsServer struct {
	metrics *prom.Metrics
	addr    net.Addr
	srv     *http.Server
	served  chan error // Serve's result
}

// startMetrics listens on addr and serves the metrics there.
func startMetrics(addr string) (*metricsServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{
		metrics: prom.New(reg),
		addr:    l.Addr(),
		srv:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served:  make(chan error, 1),
	}
	go func() { m.served <- m.srv.Serve(l) }() // joined by Close
	return m, nil
}

// Close stops serving, letting a scrape under way finish until ctx ends,
// and returns once the serving goroutine has.
func (m *metricsServer) Close(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if err != nil {
		m.srv.Close() //nolint:errcheck // Shutdown's error says why
	}
	if serr := <-m.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
