//go:build acceptance

package acceptance

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The chaos legs' in-flight traffic: every storefront runs with
// -inflight-limit chaosInflight and -report-handler-span, so that each
// executed handler reports when it began and when it wrote its status
// (X-Handler-Span, Unix ns on the host's clock, which every instance
// shares). A handler's span lies inside its request's slot, so per client
// the spans must never overlap more than chaosInflight deep, through
// kill -9, lost sessions and failovers. Spans of requests whose instance
// died before answering are not seen: they ended with their process.
const chaosInflight = 2

// chaosInflightFlags are added to every chaos leg's storefront flags.
var chaosInflightFlags = []string{"-inflight-limit", strconv.Itoa(chaosInflight), "-report-handler-span"}

// spanLog collects the distinct handler spans each client saw.
type spanLog struct {
	mu    sync.Mutex // protects spans
	spans map[string]map[string]bool
}

// add records h's span for client, if it has one (a replayed response
// may carry its first execution's; it is counted once).
func (l *spanLog) add(client string, h http.Header) {
	v := h.Get("X-Handler-Span")
	if v == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spans == nil {
		l.spans = map[string]map[string]bool{}
	}
	if l.spans[client] == nil {
		l.spans[client] = map[string]bool{}
	}
	l.spans[client][v] = true
}

// check fails t for every client whose spans overlapped deeper than
// limit, and returns the deepest overlap seen and the spans counted.
func (l *spanLog) check(t *testing.T, limit int) (deepest, spans int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	type event struct {
		at    int64
		delta int
	}
	for client, set := range l.spans {
		var evs []event
		for v := range set {
			a, b, ok := strings.Cut(v, "-")
			start, err1 := strconv.ParseInt(a, 10, 64)
			end, err2 := strconv.ParseInt(b, 10, 64)
			if !ok || err1 != nil || err2 != nil || end < start {
				t.Errorf("client %s: malformed X-Handler-Span %q", client, v)
				continue
			}
			evs = append(evs, event{start, 1}, event{end, -1})
			spans++
		}
		// An end before a start at the same instant: touching spans do
		// not overlap.
		sort.Slice(evs, func(i, j int) bool {
			return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].delta < evs[j].delta
		})
		depth, most := 0, 0
		for _, e := range evs {
			depth += e.delta
			most = max(most, depth)
		}
		if most > limit {
			t.Errorf("client %s: %d handlers ran at once, -inflight-limit %d", client, most, limit)
		}
		deepest = max(deepest, most)
	}
	return deepest, spans
}
