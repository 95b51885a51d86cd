package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/store"
)

// Defaults for [Options].
const (
	DefaultTTL     = 24 * time.Hour
	DefaultMaxBody = 1 << 20
)

// ReplayedHeader marks a response served from the store rather than by the
// handler.
const ReplayedHeader = "Idempotency-Replayed"

// Options configure an Idempotent middleware. The zero value applies to POST
// and PATCH, accepts requests without a key, and keeps responses a day.
type Options struct {
	// Methods the middleware applies to. If nil, POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a request of those methods without a key.
	RequireKey bool
	// Principal scopes keys: two principals using the same key get separate
	// records. Set it to the authenticated account (the auth middleware
	// must run first). If nil, or when it returns "", a key is scoped by
	// the client's address, as the rate limiter keys it by default (the
	// peer IP, an IPv6 client by its /64; see TrustProxy), so that one
	// client's stored response is never replayed to another that sends the
	// same key. Keys are never global unless Principal makes them so by
	// returning one constant.
	Principal func(r *http.Request) string
	// TrustProxy scopes keys without a principal by the client address
	// chi's client-IP middleware resolved (middleware.ClientIPFromXFF,
	// ClientIPFromXFFTrustedProxies), as rate.Options.TrustProxy does; set
	// it behind a proxy you control, or every client behind it shares the
	// proxy's scope. If false, the connection's peer address.
	TrustProxy bool
	// TTL is how long a stored response is kept. If zero, DefaultTTL.
	TTL time.Duration
	// MaxBody is the largest request body accepted, in bytes; a larger one
	// is refused with 413 before anything is reserved. If zero,
	// DefaultMaxBody.
	MaxBody int64
	// MaxWait bounds how long a duplicate waits for a running owner before
	// it is answered 409 with Retry-After, the draft's in-flight answer. If
	// zero, a duplicate waits as long as its request context lasts.
	MaxWait time.Duration
}

// Idempotent is the idempotency-key middleware. It is safe for concurrent
// use. Create it with [New].
type Idempotent struct {
	pool    *porch.Pool
	store   store.Store
	opt     Options
	shards  []*shard // indexed by pool shard; shards[i] is touched only by actor i
	methods []string

	warnRewritten sync.Once
}

// New returns the middleware, its in-flight state kept by pool's actors and
// its responses stored in st. It panics on a negative TTL, MaxBody or MaxWait.
func New(pool *porch.Pool, st store.Store, opt Options) *Idempotent {
	if opt.TTL < 0 || opt.MaxBody < 0 || opt.MaxWait < 0 {
		panic("idem: New expects TTL, MaxBody and MaxWait >= 0")
	}
	if opt.TTL == 0 {
		opt.TTL = DefaultTTL
	}
	if opt.MaxBody == 0 {
		opt.MaxBody = DefaultMaxBody
	}
	m := &Idempotent{pool: pool, store: st, opt: opt, shards: make([]*shard, pool.Size())}
	m.methods = opt.Methods
	if m.methods == nil {
		m.methods = []string{http.MethodPost, http.MethodPatch}
	}
	for i := range m.shards {
		m.shards[i] = &shard{flights: make(map[string]*flight)}
	}
	return m
}

// ownership is what Before hands After (and the handler, through [Exec])
// through the request context.
type ownership struct {
	key    string
	digest []byte
	caller *caller
	store  store.Store
	hold   store.Reservation
}

// ownershipKey finds m's ownership for After; ownerKey finds the innermost
// ownership for the handler's Exec and OperationID.
type (
	ownershipKey struct{ m *Idempotent }
	ownerKey     struct{}
)

// Before decides the request's outcome. It implements porch.Middleware.
func (m *Idempotent) Before(r *http.Request) (*http.Request, *porch.Response) {
	if !slices.Contains(m.methods, r.Method) {
		return r, nil
	}
	key, err := parseKey(r)
	if errors.Is(err, errKeyMissing) {
		if !m.opt.RequireKey {
			return r, nil
		}
		return r, problem(ProblemKeyRequired, http.StatusBadRequest, "Idempotency-Key required",
			"this endpoint requires an Idempotency-Key header")
	}
	if err != nil {
		return r, problem(ProblemKeyInvalid, http.StatusBadRequest, "Invalid Idempotency-Key", err.Error())
	}
	digest, res := m.digest(r)
	if res != nil {
		return r, res
	}
	key = m.scope(r, key)
	if outer, ok := r.Context().Value(ownerKey{}).(*ownership); ok && outer.key == key && outer.store == m.store {
		// An idempotency middleware further out already owns this key on
		// this store for this very request, and will store its response.
		// Leading it again would wait on our own reservation forever.
		return r, nil
	}
	for {
		c := new(caller)
		kind, f, err := m.join(r.Context(), key, digest, c)
		if err != nil {
			return r, m.unavailable(r, err)
		}
		if kind == outcomeLead {
			o, res := m.lead(r, key, digest, c)
			if o != nil {
				ctx := context.WithValue(r.Context(), ownershipKey{m}, o)
				return r.WithContext(context.WithValue(ctx, ownerKey{}, o)), nil
			}
			return r, res
		}
		if res := m.wait(r, f); res != nil {
			return r, res
		}
		switch f.kind {
		case outcomeReplay:
			return r, m.answer(f.res, digest)
		case outcomeFailed:
			return r, m.unavailable(r, f.err)
		}
		// The leader gave up (a 5xx, a panic, it left): decide afresh, and
		// the first waiter back leads.
	}
}

// join asks key's actor whether this caller leads the key's flight or waits
// on it. If the caller leaves before the answer arrives, a lead it was
// granted is handed back, so no key is left led by a caller nobody runs.
func (m *Idempotent) join(ctx context.Context, key string, digest []byte, c *caller) (outcome, *flight, error) {
	type joined struct {
		kind outcome
		f    *flight
	}
	reply := porch.NewReply[joined]()
	err := m.pool.Send(key, func(i int) {
		kind, f := m.shards[i].begin(key, c)
		reply.Send(joined{kind, f}, nil)
	})
	if err != nil {
		return 0, nil, err
	}
	j, err := reply.Wait(ctx)
	if err != nil {
		m.end(key, c, outcomeReleased, store.Response{}, nil)
		return 0, nil, err
	}
	return j.kind, j.f, nil
}

// lead runs on the leader's goroutine: it reserves the key in the store
// (across processes, where the store is shared), reads what is stored, and
// either answers from it or takes ownership, returned for After.
func (m *Idempotent) lead(r *http.Request, key string, digest []byte, c *caller) (*ownership, *porch.Response) {
	ctx := r.Context()
	hold, err := m.reserve(ctx, key)
	if errors.Is(err, errWaitedTooLong) {
		m.end(key, c, outcomeReleased, store.Response{}, nil)
		return nil, m.inFlight()
	}
	if err != nil {
		m.end(key, c, failedOrReleased(ctx, err), store.Response{}, err)
		return nil, m.unavailable(r, err)
	}
	stored, ok, err := hold.Load(ctx)
	if err != nil {
		hold.Release()
		m.end(key, c, failedOrReleased(ctx, err), store.Response{}, err)
		return nil, m.unavailable(r, err)
	}
	if !ok {
		return &ownership{key: key, digest: digest, caller: c, store: m.store, hold: hold}, nil
	}
	hold.Release()
	m.end(key, c, outcomeReplay, stored, nil)
	return nil, m.answer(stored, digest)
}

// answer is what a request gets once its key has a stored response: a
// replay when it is the same request, and 422 when the key was reused for a
// different one. Nothing is run and nothing is overwritten.
func (m *Idempotent) answer(stored store.Response, digest []byte) *porch.Response {
	if !bytes.Equal(stored.Digest, digest) {
		return problem(ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency-Key reused",
			"this key was used for a request with a different method, path or body")
	}
	return replay(stored)
}

// errWaitedTooLong reports a reservation that outlasted MaxWait.
var errWaitedTooLong = errors.New("idem: waited longer than MaxWait for the key")

// reserve reserves key in the store. With a shared store it may wait for an
// owner on another instance; MaxWait bounds that wait as it bounds a local
// duplicate's.
func (m *Idempotent) reserve(ctx context.Context, key string) (store.Reservation, error) {
	if m.opt.MaxWait <= 0 {
		return m.store.Reserve(ctx, key)
	}
	wctx, cancel := context.WithTimeout(ctx, m.opt.MaxWait)
	defer cancel()
	hold, err := m.store.Reserve(wctx, key)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, errWaitedTooLong
	}
	return hold, err
}

// failedOrReleased tells a leader that left (its context ended: the waiters
// should decide afresh) from a store that failed (the waiters fail too).
func failedOrReleased(ctx context.Context, err error) outcome {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return outcomeReleased
	}
	return outcomeFailed
}

// wait parks a duplicate until the leader's flight is over. It returns a
// response only when the wait itself ends the request (context, MaxWait).
func (m *Idempotent) wait(r *http.Request, f *flight) *porch.Response {
	var timeout <-chan time.Time
	if m.opt.MaxWait > 0 {
		t := time.NewTimer(m.opt.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-f.done:
		return nil
	case <-timeout:
		return m.inFlight()
	case <-r.Context().Done():
		return m.unavailable(r, r.Context().Err())
	}
}

// inFlight is the draft's answer to a duplicate that waited MaxWait for the
// key's owner: 409, and when to retry.
func (m *Idempotent) inFlight() *porch.Response {
	res := problem(ProblemInFlight, http.StatusConflict, "Request in flight",
		"a request with this Idempotency-Key is still being processed; retry later")
	res.SetHeader("Retry-After", strconv.Itoa(porch.RetryAfterSeconds(m.opt.MaxWait)))
	return res
}

// After stores the owner's response, with the writes its handler made
// through [Exec], and lets it out only once both are durable. A 5xx, a
// panic, or a refusal by a middleware after this one (the handler never
// ran) is not stored and the handler's writes are discarded: the key is
// handed back, and a waiting duplicate decides afresh. If the handler's
// writes fail at commit, nothing is stored and the client gets a 500
// problem instead of the handler's answer. It implements porch.Middleware.
func (m *Idempotent) After(r *http.Request, res *porch.Response, c porch.Completion) {
	o, ok := r.Context().Value(ownershipKey{m}).(*ownership)
	if !ok {
		return
	}
	status := res.StatusCode()
	if c != porch.Handled || status >= 500 {
		// Release before the flight ends: the duplicate that leads next
		// needs the key's slot (on PostgreSQL, a key connection) free.
		o.hold.Release()
		m.end(o.key, o.caller, outcomeReleased, store.Response{}, nil)
		return
	}
	stored := store.Response{
		Key: o.key, Digest: o.digest, Status: status,
		ContentType: res.Header.Get("Content-Type"), Body: res.Body,
	}
	if stored.Body == nil {
		stored.Body = []byte{} // an empty body (a 204) is a response, not a missing one
	}
	// The client may have gone; the response is stored all the same, so its
	// retry replays rather than runs the handler again.
	// Save ends the reservation whatever its outcome, so the key's slot is
	// free before the flight ends.
	if err := o.hold.Save(context.WithoutCancel(r.Context()), stored, m.opt.TTL); err != nil {
		if errors.Is(err, store.ErrWriteFailed) {
			// Nothing happened: the next duplicate may lead and try again.
			m.end(o.key, o.caller, outcomeReleased, store.Response{}, nil)
			*res = *m.writeFailed(r, err)
			return
		}
		m.end(o.key, o.caller, outcomeFailed, store.Response{}, err)
		*res = *m.unavailable(r, err)
		return
	}
	m.end(o.key, o.caller, outcomeReplay, stored, nil)
}

// end reports a flight's outcome to key's actor, waiting for mailbox room:
// the report must not be lost to saturation, or the key would stay led.
func (m *Idempotent) end(key string, c *caller, kind outcome, res store.Response, err error) {
	if sendErr := m.pool.SendWait(key, func(i int) { m.shards[i].end(key, c, kind, res, err) }); sendErr != nil {
		porch.LogError(context.Background(), "idem: report to actor failed", "err", sendErr)
	}
}

// Handler is the middleware as plain chi middleware. It buffers the
// response, which idempotency needs: nothing may reach the client before the
// response is durable.
func (m *Idempotent) Handler(next http.Handler) http.Handler { return porch.Adapt(m)(next) }

// digest reads the body (restoring it for the handler) and hashes method,
// path with query, and body.
func (m *Idempotent) digest(r *http.Request) ([]byte, *porch.Response) {
	body, err := io.ReadAll(io.LimitReader(r.Body, m.opt.MaxBody+1))
	if err != nil {
		return nil, problem(ProblemBodyUnreadable, http.StatusBadRequest, "Unreadable body", err.Error())
	}
	if int64(len(body)) > m.opt.MaxBody {
		return nil, problem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge, "Body too large",
			fmt.Sprintf("an idempotent request body may be at most %d bytes", m.opt.MaxBody))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h := sha256.New()
	io.WriteString(h, r.Method)
	h.Write([]byte{0})
	io.WriteString(h, r.URL.RequestURI())
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil), nil
}

// scope makes the lookup key: the key under the principal, or under the
// client's address when there is none, so that no client can ever read
// another's stored response. Lengths are spelled out so that no scope/key
// pair can be made to collide with another, and the two forms differ after
// "idem:" (a digit, or "ip:"). A principal's form is the one earlier
// versions stored.
func (m *Idempotent) scope(r *http.Request, key string) string {
	if m.opt.Principal != nil {
		if p := m.opt.Principal(r); p != "" {
			return "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
		}
	}
	a := m.clientAddr(r)
	return "idem:ip:" + strconv.Itoa(len(a)) + ":" + a + ":" + key
}

// clientAddr is the scope of a request without a principal. A RemoteAddr
// rewritten from a forgeable header is still used, since the real peer is
// gone by then, but logged once: it lets a client pose as another.
func (m *Idempotent) clientAddr(r *http.Request) string {
	a, rewritten := clientip.Key(r, m.opt.TrustProxy)
	if rewritten {
		m.warnRewritten.Do(func() { slog.Warn("idem: "+clientip.RewrittenWarning, "remote_addr", r.RemoteAddr) })
	}
	return a
}

// replay renders a stored response: its status, body and content type only.
// Other stored headers (Set-Cookie, Date) would be wrong to repeat.
func replay(s store.Response) *porch.Response {
	res := &porch.Response{Status: s.Status, Header: make(http.Header), Body: s.Body}
	if s.ContentType != "" {
		res.Header.Set("Content-Type", s.ContentType)
	}
	res.Header.Set(ReplayedHeader, "true")
	return res
}
