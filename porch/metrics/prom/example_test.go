package prom_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// One Metrics observes the pool, the store and the limiter; serve reg with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) at GET /metrics.
func Example() {
	dir, _ := os.MkdirTemp("", "porch-prom-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	reg := prometheus.NewRegistry()
	m := prom.New(reg)
	pool := porch.NewPool(porch.PoolOptions{Observer: m})
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{Options: store.Options{Observer: m}})
	if err != nil {
		panic(err)
	}
	lim, err := rate.New(pool, st, 2, time.Minute, rate.Options{Name: "api", Observer: m})
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(ctx, "alice")
	}
	lim.Close(ctx)
	pool.Close(ctx)
	st.Close(ctx)

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "porch_rate_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			l := s.GetLabel() // sorted by name: limiter, verdict
			fmt.Printf("%s{limiter=%q,verdict=%q} %g\n", f.GetName(), l[0].GetValue(), l[1].GetValue(), s.GetCounter().GetValue())
		}
	}
	commits, _ := testutil.GatherAndCount(reg, "porch_store_commits_total")
	fmt.Println("porch_store_commits_total exported:", commits == 1)
	// Output:
	// porch_rate_requests_total{limiter="api",verdict="allowed"} 2
	// porch_rate_requests_total{limiter="api",verdict="limited"} 1
	// porch_rate_requests_total{limiter="api",verdict="unavailable"} 0
	// porch_store_commits_total exported: true
}
