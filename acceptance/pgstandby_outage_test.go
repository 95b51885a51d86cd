//go:build acceptance

package acceptance

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// The standby-outage legs: what a storefront answers, and whether it
// starts, while the primary's synchronous standby is down.

// At power-loss, a count is answered 200 only once the standby holds it.
// While it is down every request is answered within the bound, and none
// with 200: a count committed on the primary alone after the bound would
// be lost by a failover. Fresh clients share their batches with a client
// already at its limit, whose keys the store counts apart from theirs.
func TestPostgresStandbyOutageAnswersNoUnconfirmedCount(t *testing.T) {
	c := startPGCluster(t, true)
	c.query(t, c.primary, `CREATE SCHEMA outage_counts`, nil)
	dsn := pgtest.WithParam(c.primary.DSN(), "search_path", "outage_counts")
	s := startOnPostgres(t, dsn, "outage-counts", "-durability", "power-loss", "-rate-limit", "3", "-rate-window", "1h", "-trust-proxy")
	for range 5 {
		s.try(http.MethodGet, limited, "", "X-Forwarded-For", "10.9.9.9")
	}
	c.standby.Kill()
	killed := time.Now()
	stop := make(chan struct{})
	var (
		mu      sync.Mutex // protects the answers below
		fresh   = map[int]int{}
		slowest time.Duration
	)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ip := "10.9.9.9" // at its limit
				if w%2 == 1 {
					ip = fmt.Sprintf("10.1.%d.%d", w, i%250)
				}
				at := time.Now()
				r := s.try(http.MethodGet, limited, "", "X-Forwarded-For", ip)
				mu.Lock()
				slowest = max(slowest, time.Since(at))
				if ip != "10.9.9.9" {
					st := r.Status
					if r.Err != nil {
						st = -1
					}
					fresh[st]++
					if st == http.StatusOK {
						t.Errorf("fresh client %s answered 200 after %s, %s into the outage: a count no standby holds", ip,
							time.Since(at).Round(time.Millisecond), at.Sub(killed).Round(time.Millisecond))
					}
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(15 * time.Second) // the outage's length: the clients send what they can
	close(stop)
	wg.Wait()
	t.Logf("fresh clients' answers during the outage by status: %v; slowest answer %s", fresh, slowest.Round(time.Millisecond))
	if slowest > standbyAnswerBound {
		t.Errorf("slowest answer %s, want within %s", slowest, standbyAnswerBound)
	}
	c.restartStandby(t, t)
}

// A storefront (re)started while the synchronous standby is down, with its
// schema current and its policies unchanged, starts, and at process-crash
// counts: starting commits nothing, so it waits for no standby.
func TestPostgresStartDuringStandbyOutage(t *testing.T) {
	c := startPGCluster(t, true)
	c.query(t, c.primary, `CREATE SCHEMA outage_start`, nil)
	dsn := pgtest.WithParam(c.primary.DSN(), "search_path", "outage_start")
	flags := []string{"-durability", "process-crash", "-rate-limit", "1000000", "-rate-window", "1h"}
	startOnPostgres(t, dsn, "outage-start0", flags...).stop(t)
	c.standby.Kill()

	start := time.Now()
	s, _ := launchStorefront(t, newDB(t), append([]string{"-postgres", dsn}, flags...)...)
	t.Logf("listening %s after it was started with the standby down", time.Since(start).Round(time.Millisecond))
	if r := s.try(http.MethodGet, limited, ""); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("GET %s at process-crash with the standby down: %s, want 200", limited, r)
	}
	if took := time.Since(start); took > standbyAnswerBound {
		t.Errorf("started and answered after %s, want within %s", took, standbyAnswerBound)
	}
	c.restartStandby(t, t)
}
