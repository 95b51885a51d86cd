//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// The dead-standby legs (issue 30): a primary whose synchronous standby
// gets SIGKILL while a storefront is under load. The primary lives; every
// commit at its level now waits for a standby that is not there. Every
// request must still be answered within standbyAnswerBound; at
// process-crash, where counts wait for no standby, GET /products must go
// on answering 200 while /healthz is polled and logins take their hits
// back; once the standby is started again, the same storefront serves
// 200 and 201 again, no restart.

// standbyAnswerBound is the longest any request may wait: the store's
// default bound, twice (the batch before a request's own, then its own),
// and the slack a loaded machine needs, within what a client behind a
// load balancer accepts.
const standbyAnswerBound = 11 * time.Second

func TestPostgresSynchronousStandbyKilled(t *testing.T) {
	c := startPGCluster(t, true)
	for _, durability := range []string{"power-loss", "process-crash"} {
		t.Run(durability, func(st *testing.T) { killStandbyUnderLoad(st, t, c, durability) })
	}
}

// killStandbyUnderLoad runs one durability's leg on c, whose standby is
// streaming as synchronous, and leaves it so again; the standby started
// again belongs to owner, the cluster's test.
func killStandbyUnderLoad(t, owner *testing.T, c *pgCluster, durability string) {
	schema := "standby_" + strings.ReplaceAll(durability, "-", "_")
	c.query(t, c.primary, `CREATE SCHEMA `+schema, nil)
	dsn := pgtest.WithParam(c.primary.DSN(), "search_path", schema)
	s := startOnPostgres(t, dsn, "sb-"+durability, "-durability", durability, "-rate-limit", "1000000")

	l := &standbyLoad{s: s, stop: make(chan struct{})}
	for range 3 {
		l.run("products", func() reply { return s.try(http.MethodGet, limited, "") })
	}
	l.run("order", func() reply {
		return s.try(http.MethodPost, "/checkout", mugOrder, keyHeader, uuid.NewString())
	})
	l.run("healthz", func() reply { return s.try(http.MethodGet, "/healthz", "") })
	l.run("login", func() reply { return s.try(http.MethodPost, "/login", loginRight) })
	defer l.finish()
	waitFor(t, 30*time.Second, "every kind of request answered 2xx", func() bool {
		return l.count(time.Time{}, "products", http.StatusOK) > 0 && l.count(time.Time{}, "order", http.StatusCreated) > 0 &&
			l.count(time.Time{}, "healthz", http.StatusOK) > 0 && l.count(time.Time{}, "login", http.StatusOK) > 0
	})

	killed := time.Now()
	c.standby.Kill()
	// Orders wait for the standby at either level: their 503s say the
	// bound has passed at least once. At process-crash /healthz fails
	// too (a stored response cannot commit), and products must go on
	// around it and around the logins' take-backs.
	waitFor(t, 30*time.Second, "orders, /healthz and products answered 503 since the kill, or products 200 around them", func() bool {
		if l.count(killed, "order", http.StatusServiceUnavailable) < 2 || l.count(killed, "healthz", http.StatusServiceUnavailable) < 2 {
			return false
		}
		if durability == "power-loss" {
			return l.count(killed, "products", http.StatusServiceUnavailable) >= 2
		}
		return l.count(killed, "login", http.StatusOK) >= 2 && l.count(killed, "products", http.StatusOK) >= 20
	})
	var firstFail []string // each kind's first 503 after the kill
	for _, kind := range []string{"products", "order", "healthz", "login"} {
		if at := l.first(killed, kind, http.StatusServiceUnavailable); !at.IsZero() {
			firstFail = append(firstFail, fmt.Sprintf("%s %s", kind, at.Sub(killed).Round(time.Millisecond)))
		}
	}

	restarted := time.Now()
	c.restartStandby(t, owner)
	var healed time.Duration
	waitFor(t, 30*time.Second, "products 200 and an order 201 after the standby came back", func() bool {
		p, o := l.first(restarted, "products", http.StatusOK), l.first(restarted, "order", http.StatusCreated)
		if p.IsZero() || o.IsZero() {
			return false
		}
		if o.After(p) {
			p = o
		}
		healed = p.Sub(restarted)
		return true
	})
	l.finish()

	l.mu.Lock()
	defer l.mu.Unlock()
	var slowest time.Duration
	for _, a := range l.seen {
		slowest = max(slowest, a.took)
		switch {
		case a.r.Err != nil:
			t.Errorf("%s at %s after the kill: no answer after %s: %v", a.kind, a.at.Sub(killed).Round(time.Millisecond), a.took.Round(time.Millisecond), a.r.Err)
		case a.took > standbyAnswerBound:
			t.Errorf("%s at %s after the kill: answered %d after %s, want within %s", a.kind, a.at.Sub(killed).Round(time.Millisecond), a.r.Status, a.took.Round(time.Millisecond), standbyAnswerBound)
		case a.r.Status == http.StatusServiceUnavailable && (a.r.Header.Get("Retry-After") == "" ||
			!strings.HasPrefix(a.r.Header.Get("Content-Type"), "application/problem+json")):
			t.Errorf("%s: 503 without Retry-After or problem+json: %v %s", a.kind, a.r.Header, a.r)
		case durability == "process-crash" && (a.kind == "products" || a.kind == "login") && a.r.Status != http.StatusOK:
			t.Errorf("%s at %s after the kill: %s, want 200: at process-crash counts wait for no standby, nor for /healthz or a take-back", a.kind, a.at.Sub(killed).Round(time.Millisecond), a.r)
		case a.r.Status != http.StatusOK && a.r.Status != http.StatusCreated && a.r.Status != http.StatusServiceUnavailable:
			t.Errorf("%s: %s, want 2xx or 503", a.kind, a.r)
		}
	}
	t.Logf("%s: %d requests; first 503 after the kill: %s; healed (products 200 and an order 201) %s after the standby was started again; slowest answer %s",
		durability, len(l.seen), strings.Join(firstFail, ", "), healed.Round(time.Millisecond), slowest.Round(time.Millisecond))
}

// standbyLoad is the leg's clients: each sends one kind of request over
// and over, paced, and records every answer.
type standbyLoad struct {
	s    *storefront
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu   sync.Mutex // protects seen
	seen []standbyAnswer
}

// standbyAnswer is one request: when it was sent, what came back and
// how long it took.
type standbyAnswer struct {
	kind string
	at   time.Time
	took time.Duration
	r    reply
}

// run starts a client sending send until finish.
func (l *standbyLoad) run(kind string, send func() reply) {
	l.wg.Go(func() {
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-pace.C:
			}
			at := time.Now()
			r := send()
			l.mu.Lock()
			l.seen = append(l.seen, standbyAnswer{kind: kind, at: at, took: time.Since(at), r: r})
			l.mu.Unlock()
		}
	})
}

// finish stops the clients and waits for the requests in flight.
func (l *standbyLoad) finish() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// count is how many requests of kind sent after since were answered
// status.
func (l *standbyLoad) count(since time.Time, kind string, status int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.seen {
		if a.kind == kind && a.r.Err == nil && a.r.Status == status && !a.at.Before(since) {
			n++
		}
	}
	return n
}

// first is when the first answer status to a request of kind ("" any)
// sent after since arrived, or the zero time.
func (l *standbyLoad) first(since time.Time, kind string, status int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, a := range l.seen {
		if (kind == "" || a.kind == kind) && a.r.Err == nil && a.r.Status == status && !a.at.Before(since) {
			if end := a.at.Add(a.took); first.IsZero() || end.Before(first) {
				first = end
			}
		}
	}
	return first
}

// restartStandby starts the standby again on its data directory after a
// kill, and returns once it streams from the primary as synchronous. A
// postmaster started while the killed one's children still hold its
// shared memory refuses to start; it is started again until one does.
// The new postmaster is owner's, which stops it when it ends.
func (c *pgCluster) restartStandby(t, owner *testing.T) {
	t.Helper()
	dir := c.standby.Dir
	waitFor(t, 60*time.Second, "the standby starts again", func() bool {
		s := c.progs.Start(owner, "standby", dir)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-s.Exited():
				return false
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn, err := pgx.Connect(ctx, s.DSN())
			if err == nil {
				conn.Close(ctx)
				cancel()
				c.standby = s
				return true
			}
			cancel()
			time.Sleep(readyPoll) // a poll's pace, not a synchronisation
		}
		return false
	})
	waitFor(t, 30*time.Second, "the standby streams from the primary as sync again", func() bool {
		var n int
		c.query(t, c.primary, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'`, nil, &n)
		return n == 1
	})
}
