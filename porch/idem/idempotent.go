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
	"time"

	"github.com/writeonce/writeonce/porch"
	"github.com/writeonce/writeonce/porch/store"
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
	// records. If nil, keys are global, which is only safe when every client
	// is trusted; a multi-tenant API must set it (to the authenticated
	// account), or one tenant could replay another's response by guessing
	// its key.
	Principal func(r *http.Request) string
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

// ownership is what Before hands After through the request context.
type ownership struct {
	key    string
	digest []byte
	flight *flight
	caller *caller
}

type ownershipKey struct{ m *Idempotent }

// Before decides the request's outcome. It implements porch.Middleware.
func (m *Idempotent) Before(r *http.Request) (*http.Request, *porch.Response) {
	if !slices.Contains(m.methods, r.Method) {
		return r, nil
	}
	key, err := parseKey(r)
	if errors.Is(err, errKeyMissing) && !m.opt.RequireKey {
		return r, nil
	}
	if errors.Is(err, errKeyMissing) {
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
	for {
		c := new(caller)
		d, err := m.decide(r.Context(), key, digest, c)
		if err != nil {
			return r, m.unavailable(r, err)
		}
		switch d.kind {
		case outcomeReplay:
			return r, replay(d.res)
		case outcomeConflict:
			return r, problem(ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency-Key reused",
				"this key was used for a request with a different method, path or body")
		case outcomeOwn:
			o := &ownership{key: key, digest: digest, flight: d.flight, caller: c}
			return r.WithContext(context.WithValue(r.Context(), ownershipKey{m}, o)), nil
		}
		f, res := m.wait(r, d.flight)
		if res != nil {
			return r, res
		}
		if f.released {
			continue // the owner gave up: try to become the owner
		}
		if f.err != nil {
			return r, m.unavailable(r, f.err)
		}
		return r, replay(f.res)
	}
}

// decide asks key's actor for a decision. If the caller leaves before the
// answer arrives, any ownership it was granted is handed back, so no key is
// left with an owner nobody is running.
func (m *Idempotent) decide(ctx context.Context, key string, digest []byte, c *caller) (decision, error) {
	reply := porch.NewReply[decision]()
	err := m.pool.Send(key, func(i int) {
		reply.Send(m.begin(ctx, m.shards[i], key, digest, c))
	})
	if err != nil {
		return decision{}, err
	}
	d, err := reply.Wait(ctx)
	if err != nil {
		m.report(key, func(sh *shard) { m.release(sh, key, c) })
	}
	return d, err
}

// wait parks a duplicate until the owner's flight is over. It returns a
// response only when the wait itself ends the request (context, MaxWait).
func (m *Idempotent) wait(r *http.Request, f *flight) (*flight, *porch.Response) {
	var timeout <-chan time.Time
	if m.opt.MaxWait > 0 {
		t := time.NewTimer(m.opt.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-f.done:
		return f, nil
	case <-timeout:
		res := problem(ProblemInFlight, http.StatusConflict, "Request in flight",
			"a request with this Idempotency-Key is still being processed; retry later")
		res.SetHeader("Retry-After", strconv.Itoa(porch.RetryAfterSeconds(m.opt.MaxWait)))
		return nil, res
	case <-r.Context().Done():
		return nil, m.unavailable(r, r.Context().Err())
	}
}

// After stores the owner's response and sends it only once it is durable. A
// 5xx or a panic is not stored: the key is handed back. It implements
// porch.Middleware.
func (m *Idempotent) After(r *http.Request, res *porch.Response, panicked bool) {
	o, ok := r.Context().Value(ownershipKey{m}).(*ownership)
	if !ok {
		return
	}
	status := res.StatusCode()
	if panicked || status >= 500 {
		m.report(o.key, func(sh *shard) { m.release(sh, o.key, o.caller) })
		return
	}
	now := m.store.Now()
	stored := store.Response{
		Key: o.key, Digest: o.digest, Status: status,
		ContentType: res.Header.Get("Content-Type"), Body: res.Body,
		Created: now, Expires: now.Add(m.opt.TTL),
	}
	if err := m.report(o.key, func(*shard) { m.finish(o.flight, stored) }); err != nil {
		*res = *m.unavailable(r, err)
		return
	}
	<-o.flight.done // durable before visible; the committer always answers
	m.report(o.key, func(sh *shard) { m.settle(sh, o.key, o.flight) })
	if o.flight.err != nil {
		*res = *m.unavailable(r, o.flight.err)
	}
}

// report hands a job to key's actor, waiting for mailbox room: an owner's
// report must not be lost to saturation, or its key would stay owned.
func (m *Idempotent) report(key string, job func(*shard)) error {
	err := m.pool.SendWait(key, func(i int) { job(m.shards[i]) })
	if err != nil {
		slog.Error("idem: report to actor failed", "err", err)
	}
	return err
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

// scope makes the lookup key: the bare key, under the principal when one is
// configured. Lengths are spelled out so that no principal/key pair can be
// made to collide with another.
func (m *Idempotent) scope(r *http.Request, key string) string {
	p := ""
	if m.opt.Principal != nil {
		p = m.opt.Principal(r)
	}
	return "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
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
