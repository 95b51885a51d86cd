package rate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// Set is several limiters on one route that answer as one: a burst of 100
// a minute and 1000 an hour, a per-user and a per-address limit. Build it
// with [All].
//
// Each limiter counts the request under its own Options (KeyFunc, Weight,
// DryRun, and CountStatus: once a served request's final status is known,
// each limiter whose CountStatus does not count it gets its hit back);
// they count at once, not one after another, so a request waits
// for the slowest rather than for the sum. The request is served only if
// every enforcing limiter allows it.
//
// A refused request changes nothing, as with one limiter: the hits the
// other limiters counted for it are given back. The 429 is the refusing
// limiter's (its Options.LimitResponse renders it), and its Retry-After,
// X-RateLimit-* and RateLimit all come from that one policy, so that they
// agree; when several refuse, from the one whose window closes last, since
// the client must wait for all of them. An allowed request reports the
// policy with the least remaining (on a tie, the one closing last). Either
// way RateLimit-Policy lists every policy of the set, in the order given,
// as IETF draft-10 allows: "burst";q=100;w=60, "hourly";q=1000;w=3600.
//
// Failures are a single limiter's: a KeyFunc error is a 500 and a weight
// above a limit a 413, both before anything is counted; a saturated pool or
// a failed write is a 503, and whatever the others counted is given back.
// A limiter whose KeyFunc returns porch.ErrSkip is left out; when every one is,
// the request is served uncounted and without headers.
//
// A limiter in Options.DryRun counts and is reported but never refuses: it
// is listed in RateLimit-Policy, X-RateLimit-Dry-Run says whether any
// dry-run limiter of the set would have refused, and the other headers come
// from the enforcing limiters (from the dry-run ones only when the set has
// no other). A request it cannot count is served as if it were left out.
//
// Given-back hits are exact in memory and on the next write, with two
// windows of over-count, both on the safe side: until the give-back reaches
// a limiter's actor, a concurrent request on the same key can be refused
// for a hit that is about to be given back; and on SQLite a crash before
// the key's next write leaves the given-back hit in the stored count. A
// request whose context ends while it waits is not given back either,
// since its hits may still be counted after it has gone.
//
// Limiters simply chained (r.Use(a.Handler); r.Use(b.Handler), or
// porch.Chain(a, b)) report coherently too, each 429 wholly the refusing
// limiter's, but a request the second refuses stays counted by the first,
// and an allowed one reports and announces one limiter's policy only (the
// inner one's under Handler, the outer one's under a chain). Use All for
// several limits on one route.
//
// A limiter of the set that already counted the request further out on
// the route (mounted alone, or in another set), against the key it names
// here and for the same RequestURI, is not counted again: its verdict
// there takes part in the set's decision, and it is neither given back nor
// observed by the set. A set all of whose limiters counted the request
// further out passes it on, as one mounted twice. A limiter that names
// another key here (a sub-request for another client) counts it against
// that key, and a request with another RequestURI or none (a sub-request
// built with http.NewRequest) is counted as a request of its own (see
// Limiter.Before).
//
// A Set is safe for concurrent use, and does not own its limiters: Close
// each of them. The zero value is not usable.
type Set struct {
	lims        []*Limiter
	policyValue []string // RateLimit-Policy: every limiter's policy, in order
	// settles is whether a limiter of the set has Options.CountStatus, so
	// that the set must learn the final status.
	settles bool
}

// All returns the set of the given limiters, which answers as one (see
// Set). It panics, with a "rate: " message, when given no limiter, a nil
// one, or two of one Options.Name: their policies could not be told apart
// in RateLimit-Policy.
func All(limiters ...*Limiter) *Set {
	if len(limiters) == 0 {
		panic("rate: All expects at least one limiter")
	}
	policies := make([]string, len(limiters))
	seen := make(map[string]bool, len(limiters))
	for i, l := range limiters {
		if l == nil {
			panic(fmt.Sprintf("rate: All expects non-nil limiters, got nil at %d", i))
		}
		if seen[l.opt.Name] {
			panic(fmt.Sprintf("rate: All expects limiters of distinct Options.Name, got %q twice", l.opt.Name))
		}
		seen[l.opt.Name] = true
		policies[i] = l.policy
	}
	s := &Set{lims: append([]*Limiter(nil), limiters...), policyValue: []string{strings.Join(policies, ", ")}}
	for _, l := range limiters {
		s.settles = s.settles || l.opt.CountStatus != nil
	}
	return s
}

// member is one limiter's part in counting one request.
type member struct {
	l     *Limiter
	key   string
	n     int64
	c     *call // nil until posted, and when posting failed
	v     Verdict
	start time.Time // the window the hit was counted in
	err   error
	// left marks a dry-run limiter that could not count: it is left out.
	left bool
	// prior marks a limiter that counted the request's key further out on
	// the route (mounted alone, or in another set): v is its verdict
	// there, and the set neither counts it again nor gives it back.
	prior bool
}

// counted reports whether the set counted m's hit.
func (m *member) counted() bool { return !m.prior && !m.left && m.err == nil }

// given reports whether m's hit was counted, so that it must be given back
// if the set refuses the request.
func (m *member) given() bool { return m.counted() && m.v.Allowed }

// decision is what a set answers one request: lim's verdict v, or lim's
// failure err.
type decision struct {
	lim *Limiter
	v   Verdict
	err error
	// dry is X-RateLimit-Dry-Run's value when a dry-run limiter counted
	// the request; nil otherwise.
	dry []string
	// settle is, in a chain, the members whose hits After settles with
	// the final status (see Options.CountStatus): those of the request the
	// set served, when one of its limiters has CountStatus; nil otherwise.
	// It travels with the decision so that After settles the hits of the
	// request this mount decided, never those of another on its context.
	settle []member
}

type setKey struct{ s *Set }

// countAll counts r against every limiter of the set, and decides. Its err is
// porch.ErrSkip when no limiter counts r. It returns the members, for
// withCounts.
func (s *Set) countAll(r *http.Request) (decision, []member) {
	ms, d, ok := s.resolve(r)
	if !ok {
		return d, nil
	}
	s.postAll(ms)
	ctx := r.Context()
	for i := range ms {
		m := &ms[i]
		if m.left || m.prior {
			continue // never sent
		}
		if m.c != nil {
			m.v, m.start, m.err = m.l.await(ctx, m.c)
		}
		if m.l.opt.DryRun {
			var err error
			if m.v, err = m.l.dryRun(r, m.key, m.n, m.v, m.err); err != nil {
				m.left = true
			}
		}
	}
	d = decideAll(ms)
	if d.err != nil || !d.v.Allowed {
		giveBack(ms)
	}
	observeAll(ctx, ms, d)
	return d, ms
}

// withCounts records in ctx each member the set counted, for a request of
// RequestURI uri (see requestURI), so that a mount of one of them further
// in passes the request on (see counted). The records share one
// allocation.
func withCounts(ctx context.Context, ms []member, uri string) context.Context {
	n := 0
	for i := range ms {
		if ms[i].counted() {
			n++
		}
	}
	if n == 0 {
		return ctx
	}
	recs := make([]counted, 0, n)
	for i := range ms {
		if m := &ms[i]; m.counted() {
			recs = append(recs, counted{Context: ctx, l: m.l, v: m.v, h: countedHit{key: m.key}, uri: uri}) // the set gives back
			ctx = &recs[len(recs)-1]
		}
	}
	return ctx
}

// resolve names each limiter's key and weight. A limiter that skips r is
// left out; one that cannot key or weigh it decides the request (ok false)
// before anything is counted, unless it is in DryRun: as they would with
// the set mounted once. A limiter that counted r's key further out on the
// route brings the verdict it had there.
func (s *Set) resolve(r *http.Request) (ms []member, d decision, ok bool) {
	ms = make([]member, 0, len(s.lims))
	fresh := false // some limiter is to count r here
	for _, l := range s.lims {
		key, n, err := l.resolve(r)
		switch {
		case errors.Is(err, porch.ErrSkip):
			continue
		case err != nil && l.opt.DryRun:
			l.dryRun(r, key, n, Verdict{}, err) // logs it
			continue
		case err != nil:
			return nil, decision{lim: l, err: err}, false
		}
		if c := countOf(r, l).countedAs(key, r); c != nil {
			ms = append(ms, member{l: l, key: key, v: c.v, prior: true})
			continue
		}
		ms = append(ms, member{l: l, key: key, n: n})
		fresh = true
	}
	if !fresh {
		// Nothing to count here: the set passes r on as one that skips it
		// does, leaving the headers to the mounts that counted it (the
		// same set mounted twice writes the same ones).
		return nil, decision{err: porch.ErrSkip}, false
	}
	return ms, decision{}, true
}

// postAll hands every member's hit to its actor, so that they count at once.
// After an enforcing limiter fails to take its hit, the rest are not sent:
// the request will be a 503.
func (s *Set) postAll(ms []member) {
	for i := range ms {
		m := &ms[i]
		if m.prior {
			continue
		}
		m.c, m.err = m.l.post(m.key, m.n)
		if m.err != nil && !m.l.opt.DryRun {
			for j := i + 1; j < len(ms); j++ {
				ms[j].left = true
			}
			return
		}
	}
}

// decideAll picks the answer from the members' verdicts: the first enforcing
// failure; else the enforcing refusal whose window closes last; else the
// verdict with the least remaining, enforcing limiters first.
func decideAll(ms []member) decision {
	var d decision
	var refused, best *member
	for i := range ms {
		m := &ms[i]
		if m.left {
			continue
		}
		if m.l.opt.DryRun && d.dry == nil {
			d.dry = dryRunValueOf(ms)
		}
		switch {
		case m.err != nil && !m.l.opt.DryRun:
			return decision{lim: m.l, err: m.err}
		case !m.v.Allowed && !m.l.opt.DryRun:
			if refused == nil || m.v.RetryAt.After(refused.v.RetryAt) {
				refused = m
			}
		case reportsBefore(m, best):
			best = m
		}
	}
	if refused != nil {
		best = refused
	}
	if best == nil {
		// Every member was a dry run that could not count: served
		// uncounted and without headers, as one such limiter would be.
		return decision{err: porch.ErrSkip}
	}
	d.lim, d.v = best.l, best.v
	if best.l.opt.DryRun {
		// Only dry-run limiters counted (the set has no other, or every
		// enforcing one skipped the request): they never refuse, so the
		// request is served with the headers of the one reported, and
		// X-RateLimit-Dry-Run says whether any would have refused.
		d.v.Allowed = true
	}
	d.v.DryRun = false // the set writes X-RateLimit-Dry-Run itself
	return d
}

// reportsBefore reports whether m's verdict is the one to report for an
// allowed request rather than best's: an enforcing limiter before a dry-run
// one, then the least remaining, then the window closing last.
func reportsBefore(m, best *member) bool {
	switch {
	case best == nil:
		return true
	case m.l.opt.DryRun != best.l.opt.DryRun:
		return !m.l.opt.DryRun
	case m.v.Remaining != best.v.Remaining:
		return m.v.Remaining < best.v.Remaining
	}
	return m.v.ResetAt.After(best.v.ResetAt)
}

// dryRunValueOf is X-RateLimit-Dry-Run for a set: limited if any dry-run
// member would have refused.
func dryRunValueOf(ms []member) []string {
	for i := range ms {
		if m := &ms[i]; !m.left && m.l.opt.DryRun && !m.v.Allowed {
			return dryRunLimited
		}
	}
	return dryRunAllowed
}

// giveBack takes back the hits counted for a request the set refused or
// failed, so that it changes nothing (see Set).
func giveBack(ms []member) {
	for i := range ms {
		if m := &ms[i]; m.given() {
			m.l.takeBack(m.key, m.start, m.n)
		}
	}
}

// observeAll tells each member's Options.Observer of its part: a limiter that
// refused or failed, and every limiter of a request served. A hit given
// back is not observed as allowed: the request was not.
func observeAll(ctx context.Context, ms []member, d decision) {
	served := d.err == nil && d.v.Allowed
	for i := range ms {
		m := &ms[i]
		if m.l.opt.Observer == nil || m.prior || (m.left && m.err == nil) || (m.given() && !served) {
			continue
		}
		m.l.observe(ctx, m.v, m.err)
	}
}
