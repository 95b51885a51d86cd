package rate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// copier is what a middleware between two mounts does to the request:
// auth and tracing middlewares hand on r.WithContext(ctx) or r.Clone(ctx),
// httputil.ReverseProxy a Clone. It is both a porch.Middleware and plain
// chi middleware.
type copier func(*http.Request) *http.Request

func (c copier) Before(r *http.Request) (*http.Request, *porch.Response) { return c(r), nil }
func (copier) After(*http.Request, *porch.Response, porch.Completion)    {}
func (c copier) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, c(r)) })
}

type traceKey struct{}

// copies are the ways a request reaches the mount further in.
var copies = []struct {
	name string
	cp   copier
}{
	{"same request", func(r *http.Request) *http.Request { return r }},
	{"WithContext", func(r *http.Request) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), traceKey{}, "span"))
	}},
	{"Clone", func(r *http.Request) *http.Request {
		return r.Clone(context.WithValue(r.Context(), traceKey{}, "span"))
	}},
}

// mounts is what a route of TestMountedTwiceCountsOnce mounts: a
// limiter a (in DryRun when the case says so), another limiter b, the set
// of both, a Tiered whose one tier is a, and the copy made between the
// mounts.
type mounts struct {
	a, b  *rate.Limiter
	set   *rate.Set
	tiers *rate.Tiered
	cp    copier
}

// A limiter mounted twice on one route counts each request once, whichever
// entry points mount it and whatever copy of the request a middleware
// between them hands on: the README's r.Use(lim.Handler) with
// r.With(porch.Chain(lim, keys)) counted every checkout twice (Remaining
// 79, 77, 75), silently, and once that was fixed a Clone between the
// mounts (httputil.ReverseProxy, auth and tracing middlewares) still did
// (98, 96, 94). The mount further out counts and reports; the one further
// in passes the request on. Two different limiters on one route both still
// count.
func TestMountedTwiceCountsOnce(t *testing.T) {
	const (
		policyA   = `"a";q=5;w=60`
		policyB   = `"b";q=100;w=3600`
		policySet = policyA + ", " + policyB
	)
	chain := func(m porch.Middleware, h http.Handler) http.Handler { return porch.Chain(m)(h) }
	tests := []struct {
		name  string
		wrap  func(m mounts, h http.Handler) http.Handler
		dry   bool   // a is in DryRun
		bToo  bool   // b counts each request too
		wantA bool   // the headers report a's verdict, else the set's or b's
		want  string // RateLimit-Policy
	}{
		{name: "Handler+Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(m.a.Handler(h)))
		}, wantA: true, want: policyA},
		{name: "Handler+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(chain(m.a, h)))
		}, wantA: true, want: policyA},
		{name: "Chain+Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.a, m.cp.Handler(m.a.Handler(h)))
		}, wantA: true, want: policyA},
		{name: "Chain+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.a, m.cp.Handler(chain(m.a, h)))
		}, wantA: true, want: policyA},
		{name: "one Chain twice", wrap: func(m mounts, h http.Handler) http.Handler {
			return porch.Chain(m.a, m.cp, m.a)(h)
		}, wantA: true, want: policyA},
		{name: "dry run, Handler+Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(m.a.Handler(h)))
		}, dry: true, wantA: true, want: policyA},
		{name: "dry run, Handler+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(chain(m.a, h)))
		}, dry: true, wantA: true, want: policyA},
		{name: "dry run, Chain+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.a, m.cp.Handler(chain(m.a, h)))
		}, dry: true, wantA: true, want: policyA},
		// The set reports a, which has the least remaining, and both
		// policies.
		{name: "Handler+Set", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(m.set.Handler(h)))
		}, bToo: true, wantA: true, want: policySet},
		{name: "Set+Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.set.Handler(m.cp.Handler(m.a.Handler(h)))
		}, bToo: true, wantA: true, want: policySet},
		{name: "Handler+Set chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(chain(m.set, h)))
		}, bToo: true, wantA: true, want: policySet},
		{name: "Set chain+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.set, m.cp.Handler(chain(m.a, h)))
		}, bToo: true, wantA: true, want: policySet},
		// The chain further in must not write a's headers over the set's.
		{name: "Set.Handler+Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.set.Handler(m.cp.Handler(chain(m.a, h)))
		}, bToo: true, wantA: true, want: policySet},
		// Under a chain the outer limiter reports last.
		{name: "Chain of a and the set", wrap: func(m mounts, h http.Handler) http.Handler {
			return porch.Chain(m.a, m.cp, m.set)(h)
		}, bToo: true, wantA: true, want: policyA},
		{name: "Set twice", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.set.Handler(m.cp.Handler(chain(m.set, h)))
		}, bToo: true, wantA: true, want: policySet},
		{name: "Set chain twice", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.set, m.cp.Handler(chain(m.set, h)))
		}, bToo: true, wantA: true, want: policySet},
		{name: "Tiers+Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.tiers.Handler(m.cp.Handler(m.a.Handler(h)))
		}, wantA: true, want: policyA},
		{name: "Handler+Tiers chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(chain(m.tiers, h)))
		}, wantA: true, want: policyA},
		{name: "Tiers chain+Tiers", wrap: func(m mounts, h http.Handler) http.Handler {
			return chain(m.tiers, m.cp.Handler(m.tiers.Handler(h)))
		}, wantA: true, want: policyA},
		// Different limiters: both count, as before.
		{name: "different limiters, Handler", wrap: func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(m.b.Handler(h)))
		}, bToo: true, want: policyB},
		{name: "different limiters, Chain", wrap: func(m mounts, h http.Handler) http.Handler {
			return porch.Chain(m.a, m.cp, m.b)(h)
		}, bToo: true, wantA: true, want: policyA},
	}
	alice := func(*http.Request) (string, error) { return "alice", nil }
	tierA := func(*http.Request) (string, error) { return "a", nil }
	for _, tt := range tests {
		for _, c := range copies {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Name: "a", KeyFunc: alice, DryRun: tt.dry}})
				b, err := rate.New(rg.pool, rg.st, 100, time.Hour, rate.Options{Name: "b", KeyFunc: alice})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close(context.Background()) })
				m := mounts{
					a: rg.lim, b: b, set: rate.All(rg.lim, b),
					tiers: rate.Tiers(tierA, map[string]rate.Tier{"a": rg.lim}),
					cp:    c.cp,
				}
				h := &counted{}
				handler := tt.wrap(m, h)
				for i := int64(1); i <= 3; i++ {
					res, body := serve(handler, request("192.0.2.1:1"))
					if res.StatusCode != http.StatusOK || h.runs.Load() != i {
						t.Fatalf("request %d: got status %d (%s), handler runs %d", i, res.StatusCode, body, h.runs.Load())
					}
					wantB := int64(100)
					if tt.bToo {
						wantB -= i
					}
					if got := peek(t, rg.lim); got != 5-i {
						t.Errorf("request %d: a has %d left, want %d: counted once per request", i, got, 5-i)
					}
					if got := peek(t, b); got != wantB {
						t.Errorf("request %d: b has %d left, want %d", i, got, wantB)
					}
					want := strconv.FormatInt(wantB, 10)
					if tt.wantA {
						want = strconv.FormatInt(5-i, 10)
					}
					if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != want {
						t.Errorf("request %d: got X-RateLimit-Remaining %q, want [%s]", i, got, want)
					}
					if got := res.Header.Values("RateLimit-Policy"); len(got) != 1 || got[0] != tt.want {
						t.Errorf("request %d: got RateLimit-Policy %q, want [%s]", i, got, tt.want)
					}
					if got := res.Header.Values("X-RateLimit-Dry-Run"); tt.dry && (len(got) != 1 || got[0] != "allowed") {
						t.Errorf("request %d: got X-RateLimit-Dry-Run %q, want [allowed]", i, got)
					}
				}
			})
		}
	}
}

// peek is l's Remaining for alice.
func peek(t *testing.T, l *rate.Limiter) int64 {
	t.Helper()
	v, err := l.Peek(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	return v.Remaining
}

// A limiter mounted twice gives a request's hit back once when its status
// does not count (Options.CountStatus): a Set's chain further in, which
// passes the request on, gave the hit counted further out back too, and
// so took back another request's (an earlier failure's) hit with it.
func TestMountedTwiceGivesBackOnce(t *testing.T) {
	chain := func(m porch.Middleware, h http.Handler) http.Handler { return porch.Chain(m)(h) }
	tests := []struct {
		name string
		wrap func(m mounts, h http.Handler) http.Handler
	}{
		{"Set chain twice", func(m mounts, h http.Handler) http.Handler {
			return chain(m.set, m.cp.Handler(chain(m.set, h)))
		}},
		{"Handler+Set chain", func(m mounts, h http.Handler) http.Handler {
			return m.a.Handler(m.cp.Handler(chain(m.set, h)))
		}},
		{"Set.Handler+Set chain", func(m mounts, h http.Handler) http.Handler {
			return m.set.Handler(m.cp.Handler(chain(m.set, h)))
		}},
		{"Tiers chain twice", func(m mounts, h http.Handler) http.Handler {
			return chain(m.tiers, m.cp.Handler(chain(m.tiers, h)))
		}},
		{"Chain+Chain", func(m mounts, h http.Handler) http.Handler {
			return chain(m.a, m.cp.Handler(chain(m.a, h)))
		}},
	}
	alice := func(*http.Request) (string, error) { return "alice", nil }
	set := func(*http.Request) (string, error) { return "set", nil }
	for _, tt := range tests {
		for _, c := range copies {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Name: "a", KeyFunc: alice, CountStatus: rate.Failures}})
				m := mounts{
					a: rg.lim, set: rate.All(rg.lim),
					tiers: rate.Tiers(set, map[string]rate.Tier{"set": rate.All(rg.lim)}),
					cp:    c.cp,
				}
				handler := tt.wrap(m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/fail" {
						w.WriteHeader(http.StatusUnauthorized)
					}
				}))
				for i, path := range []string{"/fail", "/fail", "/", "/"} {
					req := request("192.0.2.1:1")
					req.URL.Path = path
					serve(handler, req)
					want := int64(3) // the two failures count, the rest are given back
					if i == 0 {
						want = 4
					}
					if got := peek(t, rg.lim); got != want {
						t.Errorf("after %s (request %d): a has %d left, want %d", path, i+1, got, want)
					}
				}
			})
		}
	}
}

// A mount further in keys the request again, and answers as it would
// mounted alone when its KeyFunc names no key it counted: a middleware
// between the mounts that makes the KeyFunc skip the request serves it
// without a second count, one that makes it fail answers 500 (the hit the
// mount further out counted is given back once, as for any 500 its
// CountStatus does not count), and one that makes it name another client
// counts that client too.
func TestMountedTwiceKeyedAgain(t *testing.T) {
	errKey := errors.New("no principal")
	keyFunc := func(r *http.Request) (string, error) {
		switch who := r.Header.Get("X-Inner"); who {
		case "":
			return "alice", nil
		case "skip":
			return "", porch.ErrSkip
		case "error":
			return "", errKey
		default:
			return who, nil
		}
	}
	tests := []struct {
		inner      string // what the KeyFunc sees further in
		wantStatus int
		wantAlice  int64 // remaining, after a first request and this one
		wantBob    int64
	}{
		{"skip", http.StatusOK, 3, 5},
		{"error", http.StatusInternalServerError, 4, 5},
		{"bob", http.StatusOK, 3, 4},
	}
	// A Tiered whose pick, too, skips or fails where the KeyFunc does.
	pickedAgain := func(l *rate.Limiter) (outer, inner mw) {
		pick := func(r *http.Request) (string, error) {
			_, err := keyFunc(r)
			return "one", err
		}
		tiers := porch.Chain(rate.Tiers(pick, map[string]rate.Tier{"one": l}))
		return tiers, tiers
	}
	mounts := append(subMounts[:len(subMounts):len(subMounts)], struct {
		name  string
		mount func(l *rate.Limiter) (outer, inner mw)
	}{"Tiers picked again, chain", pickedAgain})
	for _, tt := range tests {
		for _, mount := range mounts {
			t.Run(tt.inner+"/"+mount.name, func(t *testing.T) {
				rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: keyFunc, CountStatus: rate.UnlessServerError}})
				between := copier(func(r *http.Request) *http.Request {
					if r.URL.Path == "/plain" {
						return r
					}
					r = r.Clone(r.Context())
					r.Header.Set("X-Inner", tt.inner)
					return r
				})
				h := &counted{}
				handler := mountTwice(mount.mount, rg.lim, between, h)
				req := request("192.0.2.1:1")
				req.URL.Path = "/plain"
				if res, body := serve(handler, req); res.StatusCode != http.StatusOK {
					t.Fatalf("first request: got status %d (%s), want 200", res.StatusCode, body)
				}
				res, body := serve(handler, request("192.0.2.1:1"))
				if res.StatusCode != tt.wantStatus {
					t.Fatalf("got status %d (%s), want %d", res.StatusCode, body, tt.wantStatus)
				}
				if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 {
					t.Errorf("got X-RateLimit-Remaining %q, want one value", got)
				}
				for _, w := range []struct {
					who  string
					want int64
				}{{"alice", tt.wantAlice}, {"bob", tt.wantBob}} {
					v, err := rg.lim.Peek(context.Background(), w.who)
					if err != nil {
						t.Fatal(err)
					}
					if v.Remaining != w.want {
						t.Errorf("%s has %d left, want %d", w.who, v.Remaining, w.want)
					}
				}
			})
		}
	}
}

// A limiter mounted on a router and again behind http.StripPrefix or
// chi's Mount counts each request once: StripPrefix hands on a copy with a
// new URL and the RequestURI the server read, and chi's Mount routes the
// same request on. So too for a request built in-process, whose
// RequestURI http.NewRequest leaves empty.
func TestMountedTwiceBehindAPrefix(t *testing.T) {
	alice := func(*http.Request) (string, error) { return "alice", nil }
	tests := []struct {
		name string
		wrap func(l *rate.Limiter, h http.Handler) http.Handler
	}{
		{"StripPrefix, Handler+Handler", func(l *rate.Limiter, h http.Handler) http.Handler {
			return l.Handler(http.StripPrefix("/api", l.Handler(h)))
		}},
		{"StripPrefix, Chain+Chain", func(l *rate.Limiter, h http.Handler) http.Handler {
			return porch.Chain(l)(http.StripPrefix("/api", porch.Chain(l)(h)))
		}},
		{"StripPrefix, Handler+Set chain", func(l *rate.Limiter, h http.Handler) http.Handler {
			return l.Handler(http.StripPrefix("/api", porch.Chain(rate.All(l))(h)))
		}},
		{"chi Mount, Handler+Handler", func(l *rate.Limiter, h http.Handler) http.Handler {
			sub := chi.NewRouter()
			sub.Use(l.Handler)
			sub.Handle("/orders", h)
			r := chi.NewRouter()
			r.Use(l.Handler)
			r.Mount("/api", sub)
			return r
		}},
	}
	builds := []struct {
		name string
		req  func() *http.Request
	}{
		{"from a server", func() *http.Request { return httptest.NewRequest(http.MethodGet, "/api/orders", nil) }},
		{"built in-process", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, "/api/orders", nil)
			return r
		}},
	}
	for _, tt := range tests {
		for _, b := range builds {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{Name: "a", KeyFunc: alice}})
				h := &counted{}
				handler := tt.wrap(rg.lim, h)
				for i := int64(1); i <= 3; i++ {
					res, body := serve(handler, b.req())
					if res.StatusCode != http.StatusOK || h.runs.Load() != i {
						t.Fatalf("request %d: got status %d (%s), handler runs %d", i, res.StatusCode, body, h.runs.Load())
					}
					if got := peek(t, rg.lim); got != 5-i {
						t.Errorf("request %d: a has %d left, want %d: counted once per request", i, got, 5-i)
					}
				}
			})
		}
	}
}
