package main

import (
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// healthz answers 200 "ok" only while the database answers and porch's
// stores can commit (the SQL store, and Redis when the limiter counts
// there): a ping alone succeeds on a read-only file or a full
// disk, where every count and every stored response fails. It is not rate
// limited, so it must stay cheap: a store's Health answers from the last commit
// and probes with at most one write a second, however often it is polled.
func (s *shop) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.db.PingContext(r.Context()); err != nil {
		s.notReady(w, "the database does not answer", err)
		return
	}
	if err := s.st.sql.Health(r.Context()); err != nil {
		s.notReady(w, "the store cannot commit writes; counts and stored responses are failing", err)
		return
	}
	if s.st.redis != nil {
		if err := s.st.redis.Health(r.Context()); err != nil {
			s.notReady(w, "Redis cannot count; rate-limited requests are failing", err)
			return
		}
	}
	s.health.report(nil)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// notReady is the 503 with Retry-After for an unhealthy store; the error
// itself goes to the log, not the client.
func (s *shop) notReady(w http.ResponseWriter, reason string, err error) {
	s.health.report(err)
	porch.Unavailable(problemBase+"not-ready", reason, time.Second).Write(w)
}

// healthLog logs when /healthz changes its answer, not on every poll: a
// probe polled every 100 ms against a failing disk would otherwise log ten
// errors a second.
type healthLog struct {
	mu      sync.Mutex // protects failing
	failing bool
}

func (h *healthLog) report(err error) {
	h.mu.Lock()
	changed := h.failing != (err != nil)
	h.failing = err != nil
	h.mu.Unlock()
	switch {
	case !changed:
	case err != nil:
		slog.Error("storefront: not ready", "err", err)
	default:
		slog.Info("storefront: ready again")
	}
}
