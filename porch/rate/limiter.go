package rate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// Problem types this package answers with.
const (
	ProblemLimited     = "https://porch.dev/problems/rate-limited"
	ProblemUnavailable = "https://porch.dev/problems/rate-unavailable"
)

// forgetPerHit bounds how many closed windows one hit lets go of, so eviction
// costs a constant per request.
const forgetPerHit = 4

// Options configure a Limiter. The zero value keys on the connection's peer.
type Options struct {
	// Name scopes this limiter's counters, so that several limiters can share
	// one store, and names the policy in the RateLimit headers. Two limiters
	// with different limits or windows need different Names: New refuses a
	// second one under a Name in use (see New). If empty, "default".
	Name string
	// TrustProxy keys on the client IP resolved by chi's client-IP
	// middleware (middleware.ClientIPFromXFF, ClientIPFromXFFTrustedProxies,
	// ClientIPFromHeader), which must run before the limiter. Set it only
	// when a proxy you control overwrites that header; the limiter itself
	// never parses X-Forwarded-For. If false, the key is the connection's
	// peer address, which cannot be forged, unless a middleware such as
	// chi's middleware.RealIP has already overwritten it from a header:
	// never use RealIP with this limiter (see the package doc).
	TrustProxy bool
	// Key, if set, returns the principal to count a request against (an API
	// key, a user id). It returns "" to fall back to the client IP.
	Key func(r *http.Request) string
	// WriteAhead bounds how far ahead of a key's count the stored count may
	// run, with a store that is the counters' only writer (SQLite). Writing
	// ahead lets later hits answer without a write of their own once the
	// bound has committed. A crash can then over-count a key by up to this
	// many (the safe side for a limiter: a client may be refused early,
	// never served beyond its limit); Close writes the exact counts. If
	// zero, DefaultWriteAhead; negative writes every hit exactly.
	WriteAhead int
}

// Limiter allows Limit requests per key in each fixed window of Window. A
// key's window opens at its first request and closes Window later, measured
// on the store's monotonic timeline, so a wall-clock jump (even across a
// restart) grants no extra allowance.
//
// A Limiter is safe for concurrent use. Create it with [New].
type Limiter struct {
	pool      *porch.Pool
	store     store.Store
	exclusive store.ExclusiveCounters // set when this process is the counters' only writer
	shared    store.SharedCounters    // set otherwise
	limit     int64
	window    time.Duration
	ahead     int64 // Options.WriteAhead, resolved
	opt       Options
	views     []*view // indexed by pool shard; views[i] is touched only by actor i
	policy    string  // RateLimit-Policy value, fixed per limiter
	// Header values fixed per limiter, built once.
	limitValue, policyValue []string
	rateLimitPrefix         string
	prefix                  string // counter key prefix
	release                 func() // ends the store's claim of this limiter's policy
	warnRewritten           sync.Once
}

// Verdict is a limiter's decision for one request, with what the response
// headers report.
type Verdict struct {
	Allowed   bool
	Limit     int64
	Remaining int64
	// ResetAt is when the window closes, on the wall clock, fixed when the
	// verdict was made so that every response of one window reports the
	// same instant however long its write took.
	ResetAt time.Time
}

type verdictKey struct{ l *Limiter }

// New returns a limiter of limit requests per window, counted by pool's
// actors and persisted in st.
//
// With a store that is its counters' only writer (SQLite) each actor keeps
// its keys' counts in memory and writes them through; New loads the counters
// of still-open windows, so a restart resumes them. With a shared store
// (PostgreSQL) every hit is one atomic statement on the database.
//
// Limiters on one store are told apart by Options.Name, and New refuses
// (store.ErrPolicyConflict) a second limiter of one Name with another limit
// or window while the first counts: they would write the same rows, each by
// its own rule. On PostgreSQL that holds across instances: while any
// running instance counts a Name under one policy, an instance with another
// is refused; once they have all stopped, the first to start records its
// policy (a deploy that changes it). Close frees the Name. A policy changed
// between runs applies to windows still open: their counts are kept, the
// new limit applies to them at once, and each closes at its old end or one
// new window from now, whichever is sooner.
//
// It panics if limit < 1, window is under a millisecond, or st keeps no
// counters, and returns an error if the policy is refused or loading fails.
func New(pool *porch.Pool, st store.Store, limit int, window time.Duration, opt Options) (*Limiter, error) {
	if limit < 1 {
		panic("rate: New expects limit >= 1")
	}
	if window < time.Millisecond {
		panic("rate: New expects window >= 1ms")
	}
	if opt.Name == "" {
		opt.Name = "default"
	}
	ahead := int64(opt.WriteAhead)
	switch {
	case ahead == 0:
		ahead = DefaultWriteAhead
	case ahead < 0:
		ahead = 0
	}
	l := &Limiter{
		pool: pool, store: st, limit: int64(limit), window: window, ahead: ahead, opt: opt,
		policy: fmt.Sprintf(`%q;q=%d;w=%d`, opt.Name, limit, porch.RetryAfterSeconds(window)),
		prefix: "rate:" + opt.Name + ":",
	}
	l.limitValue = []string{strconv.Itoa(limit)}
	l.policyValue = []string{l.policy}
	l.rateLimitPrefix = `"` + opt.Name + `";r=`
	var claimer interface {
		ClaimPolicy(context.Context, store.Policy) (func(), error)
	}
	switch c := st.(type) {
	case store.ExclusiveCounters:
		l.exclusive, claimer = c, c
	case store.SharedCounters:
		l.shared, claimer = c, c
	default:
		panic(fmt.Sprintf("rate: New expects a store with counters, got %T", st))
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	release, err := claimer.ClaimPolicy(ctx, store.Policy{Name: opt.Name, Limit: l.limit, Window: window})
	if err != nil {
		return nil, fmt.Errorf("rate: %w", err)
	}
	l.release = release
	if l.exclusive != nil {
		if err := l.load(context.Background()); err != nil {
			release()
			return nil, err
		}
	}
	return l, nil
}

// claimTimeout bounds New's claim of its policy in a shared store.
const claimTimeout = 30 * time.Second

// ErrNoPrincipal is returned by Allow for an empty principal: counting
// every caller that lacks one against one shared counter would be a limit
// nobody chose.
var ErrNoPrincipal = errors.New("rate: Allow needs a non-empty principal")

// key is the counter key r is counted against: the limiter's prefix, then
// the principal Options.Key returns, or else the client address. The
// storage format stays inside the package, so that what a caller counts
// is always what load reads back after a restart.
func (l *Limiter) key(r *http.Request) string {
	if l.opt.Key != nil {
		if k := l.opt.Key(r); k != "" {
			return l.principalKey(k)
		}
	}
	return l.prefix + "ip:" + l.clientKey(r)
}

func (l *Limiter) principalKey(principal string) string { return l.prefix + "p:" + principal }

// Allow counts one request by principal (an API key, a user id) outside an
// HTTP handler, and returns the verdict once the new count is durable. It
// shares its counter with requests for which Options.Key returns the same
// principal, and like theirs the count survives a restart. It fails with
// ErrNoPrincipal for "", with porch.ErrSaturated when the key's mailbox is
// full, with the store's error when the write failed, and with ctx.Err().
// In every failure the caller must not serve the request.
func (l *Limiter) Allow(ctx context.Context, principal string) (Verdict, error) {
	if principal == "" {
		return Verdict{}, ErrNoPrincipal
	}
	return l.allow(ctx, l.principalKey(principal))
}

// allow counts one request against the counter key.
func (l *Limiter) allow(ctx context.Context, key string) (Verdict, error) {
	// porch.Call, unrolled: one closure instead of two on the hot path.
	reply := porch.NewReply[Verdict]()
	err := l.pool.Send(key, func(shard int) {
		if l.exclusive != nil {
			l.hit(l.views[shard], key, reply)
		} else {
			l.hitShared(key, reply)
		}
	})
	if err != nil {
		return Verdict{}, err
	}
	return reply.Wait(ctx)
}

// hit runs on key's actor when the store is the counters' only writer. The
// verdict is sent once the store holds a count at least this hit's: at once
// when a committed write already covers it, after the queued write that
// covers it commits, or after a new write (see nextBound) commits. A hot key
// (see hot) queues its next write while half its margin is left, so its hits
// seldom wait for a commit at all.
func (l *Limiter) hit(v *view, key string, reply porch.Reply[Verdict]) {
	now := l.exclusive.Now()
	v.forget(now, l.window, forgetPerHit)
	w, ok := v.counts[key]
	if !ok || !now.Before(w.start.Add(l.window)) {
		w = v.open(key, now) // a closed window is reset on this access
		l.armForget(v, now)
	}
	verdict := Verdict{Limit: l.limit, ResetAt: l.store.Wall().Add(w.start.Add(l.window).Sub(now))}
	if w.count >= l.limit {
		// Nothing changes, so nothing is written; a refusal never lets a
		// request through, so it need not wait for earlier writes.
		reply.Send(verdict, nil)
		return
	}
	w.count++
	verdict.Allowed = true
	verdict.Remaining = l.limit - w.count
	if w.pending != nil {
		if durable, failed := w.pending.state(); durable {
			w.durable, w.pending, w.pendingAt = max(w.durable, w.pendingAt), nil, 0
		} else if failed {
			w.pending, w.pendingAt = nil, 0 // its waiters got the error; write again
		}
	}
	switch {
	case w.count <= w.durable:
		reply.Send(verdict, nil) // the common case: no write, no wait
		if l.hot(w) {
			l.writeAhead(key, &w, nil)
		}
	case w.pending != nil && w.count <= w.pendingAt:
		w.pending.wait(func(err error) { reply.Send(verdict, err) })
	default:
		l.writeAhead(key, &w, func(err error) { reply.Send(verdict, err) })
	}
	v.counts[key] = w
}

// forgetPerTick bounds how many closed windows one timer-driven forget job
// lets go of before it yields the actor to requests again.
const forgetPerTick = 4096

// armForget runs on v's actor: unless armed already, it sets v's timer to
// send the actor a forget job when v's oldest window closes. Hits let go of
// a few closed windows each; the timer is for an actor that gets no more
// hits, whose keys would otherwise stay in memory for good.
func (l *Limiter) armForget(v *view, now time.Time) {
	end, ok := v.oldest(l.window)
	if v.armed || !ok {
		return
	}
	v.armed = true
	wait := end.Sub(now) + time.Millisecond
	if v.timer != nil {
		v.timer.Reset(wait)
		return
	}
	v.timer = time.AfterFunc(wait, func() { l.forgetTick(v) })
}

// forgetTick runs on v's timer: it hands v's actor a forget job, and tries
// again in a second while the mailbox is full (hits are forgetting
// meanwhile). After Close the pool refuses, and the ticking stops.
func (l *Limiter) forgetTick(v *view) {
	err := l.pool.SendShard(v.shard, false, func(int) {
		now := l.exclusive.Now()
		v.forget(now, l.window, forgetPerTick)
		v.armed = false
		l.armForget(v, now)
	})
	if errors.Is(err, porch.ErrSaturated) {
		time.AfterFunc(time.Second, func() { l.forgetTick(v) })
	}
}

// hot reports whether a hit answered from the committed bound should queue
// the next bound now, before any hit has to wait for it: only for a key that
// has already had ahead/2 hits in this window and has less than half its
// margin left. A queued write no request waits on is not bounded by the
// number of connections, so doing this for every key would let a crowd of
// cool keys pile writes up in the committer's queue, and every first hit
// would wait behind them.
func (l *Limiter) hot(w tally) bool {
	return w.pending == nil && w.durable < l.limit && w.count >= l.ahead/2 && w.durable-w.count < l.ahead/2
}

// writeAhead queues the write of key's next bound and records it as pending;
// answer, if not nil, waits for it.
func (l *Limiter) writeAhead(key string, w *tally, answer func(error)) {
	bw := new(boundWrite)
	if answer != nil {
		bw.wait(answer)
	}
	w.pending, w.pendingAt = bw, nextBound(w.count, l.ahead, l.limit)
	c := store.Counter{Key: key, WindowStart: w.start, Window: l.window, Count: w.pendingAt}
	if err := l.exclusive.SaveCounter(c, bw.settle); err != nil {
		bw.settle(err)
	}
}

// hitShared runs on key's actor when other processes write the same
// counters: the database counts, atomically, and the actor only orders this
// process's hits and lets the committer batch them.
func (l *Limiter) hitShared(key string, reply porch.Reply[Verdict]) {
	err := l.shared.AddHit(key, l.window, func(h store.Hit, err error) {
		v := Verdict{Limit: l.limit, ResetAt: l.store.Wall().Add(h.ResetIn), Allowed: h.Count <= l.limit}
		v.Remaining = max(l.limit-h.Count, 0)
		reply.Send(v, err)
	})
	if err != nil {
		reply.Send(Verdict{}, err)
	}
}

// Before counts the request. A refusal short-circuits with 429; a failure
// with 503. It implements porch.Middleware.
func (l *Limiter) Before(r *http.Request) (*http.Request, *porch.Response) {
	v, err := l.allow(r.Context(), l.key(r))
	if err != nil {
		return r, l.unavailable(r, err)
	}
	r = r.WithContext(context.WithValue(r.Context(), verdictKey{l}, v))
	if !v.Allowed {
		res := l.refusal(v)
		return r, res
	}
	return r, nil
}

// After puts the rate-limit headers on the final response. It implements
// porch.Middleware.
func (l *Limiter) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	if v, ok := r.Context().Value(verdictKey{l}).(Verdict); ok {
		if res.Header == nil {
			res.Header = make(http.Header)
		}
		l.setHeaders(res.Header, v)
	}
}

// Handler is the limiter as plain chi middleware. Unlike a porch chain it
// does not buffer the response: headers are set before next runs.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := l.allow(r.Context(), l.key(r))
		if err != nil {
			l.unavailable(r, err).Write(w)
			return
		}
		if !v.Allowed {
			l.refusal(v).Write(w)
			return
		}
		l.setHeaders(w.Header(), v)
		next.ServeHTTP(w, r)
	})
}

// setHeaders writes the X-RateLimit-* triple and the IETF draft-10 RateLimit
// and RateLimit-Policy fields. X-RateLimit-Reset is a Unix timestamp on the
// wall clock, because a client has no access to this process's timeline.
func (l *Limiter) setHeaders(h http.Header, v Verdict) {
	left := max(v.ResetAt.Sub(l.store.Wall()), 0)
	secs := int64((left + time.Second - 1) / time.Second)
	resetUnix := v.ResetAt.Unix()
	if v.ResetAt.Nanosecond() > 0 {
		resetUnix++ // round up: the window is not over before this second
	}
	remaining := strconv.FormatInt(v.Remaining, 10)
	// Canonical keys assigned directly: Header.Set would canonicalize and
	// allocate on every response. The fixed values share one slice per
	// limiter, which net/http only reads.
	h[hdrLimit] = l.limitValue
	h[hdrPolicy] = l.policyValue
	h[hdrRemaining] = []string{remaining}
	h[hdrReset] = []string{strconv.FormatInt(resetUnix, 10)}
	h[hdrRateLimit] = []string{l.rateLimitPrefix + remaining + ";t=" + strconv.FormatInt(secs, 10)}
}

// Canonical header keys, as http.CanonicalHeaderKey spells them.
var (
	hdrLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
	hdrPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit = http.CanonicalHeaderKey("RateLimit")
)

// refusal is the 429 for v: Retry-After is the time until this key's window
// closes, not the whole window.
func (l *Limiter) refusal(v Verdict) *porch.Response {
	res := porch.Problem{
		Type:   ProblemLimited,
		Title:  "Too Many Requests",
		Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("limit of %d requests per %s reached", v.Limit, l.window),
	}.Response()
	l.setHeaders(res.Header, v)
	res.Header.Set("Retry-After", strconv.Itoa(porch.RetryAfterSeconds(v.ResetAt.Sub(l.store.Wall()))))
	return res
}

// unavailable is the fail-closed answer: the request was not counted, so it
// must not be served.
func (l *Limiter) unavailable(r *http.Request, err error) *porch.Response {
	return porch.FailClosed(r, ProblemUnavailable, "count this request", err)
}
