package rate_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// BenchmarkAllowPostgresLowLoad is `just bench-handwritten`'s one-key rows
// at one and two connections without HTTP: callers each wait for a
// verdict before asking the next, on porch's limiter and on what a chi
// user writes by hand (one autocommit upsert a request on a pgx pool),
// at both durability levels. Besides ns/op it reports this process's CPU
// per verdict (cpu-µs/op), the steadier figure on a shared machine, and
// the whole machine's (machine-µs/op: the database's backends too, and
// whatever else runs, so quote it from a quiet machine only).
//
//	go test -run '^$' -bench AllowPostgresLowLoad -benchtime 3s ./porch/rate/
func BenchmarkAllowPostgresLowLoad(b *testing.B) {
	for _, level := range []struct {
		name string
		d    store.Durability
	}{{"power-loss", store.SurvivesPowerLoss}, {"process-crash", store.SurvivesProcessCrash}} {
		for _, callers := range []int{1, 2} {
			b.Run(fmt.Sprintf("porch/%s/c=%d", level.name, callers), func(b *testing.B) {
				st := pgstore.Open(b, pgtest.DSN(b), postgres.Options{Options: store.Options{Durability: level.d}})
				pool := porch.NewPool(porch.PoolOptions{})
				b.Cleanup(func() { pool.Close(context.Background()) })
				lim, err := rate.New(pool, st, 1<<40, time.Hour, rate.Options{Name: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				lowLoad(b, callers, func(ctx context.Context) error {
					v, err := lim.Allow(ctx, "one")
					if err == nil && !v.Allowed {
						err = fmt.Errorf("refused: %+v", v)
					}
					return err
				})
			})
			b.Run(fmt.Sprintf("handwritten/%s/c=%d", level.name, callers), func(b *testing.B) {
				cfg, err := pgxpool.ParseConfig(pgtest.DSN(b))
				if err != nil {
					b.Fatal(err)
				}
				cfg.MaxConns = 64
				if level.d == store.SurvivesProcessCrash {
					cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
				}
				pl, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pl.Close)
				if _, err := pl.Exec(context.Background(), `CREATE TABLE c (k text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
					b.Fatal(err)
				}
				lowLoad(b, callers, func(ctx context.Context) error {
					var n int64
					return pl.QueryRow(ctx, `INSERT INTO c (k, n) VALUES ($1, 1)
						ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n`, "one").Scan(&n)
				})
			})
		}
	}
}

// lowLoad runs b.N verdicts over callers goroutines, each waiting for its
// answer before the next, after a warm-up, and reports CPU per verdict.
func lowLoad(b *testing.B, callers int, verdict func(context.Context) error) {
	ctx := context.Background()
	for range 200 {
		if err := verdict(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0, busy0 := processCPU(), machineBusy()
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := verdict(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	if busy0 >= 0 {
		b.ReportMetric(float64((machineBusy()-busy0).Microseconds())/float64(b.N), "machine-µs/op")
	}
}

// machineBusy is the CPU time every core has spent not idle since boot,
// from /proc/stat (Linux), or -1 where it cannot be read.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var ticks int64
	for i, v := range f[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
