package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// subBuilds are the ways a batch endpoint builds the operations it replays
// through its router, on the context it is given: for another client (the
// a hostile review once replayed ten operations for another user
// against a limit of 3, and all ten passed uncounted), or for the batch's
// own client. An operation for the batch's own client built with
// http.NewRequestWithContext has no RequestURI, so it is not the batch
// again and is counted (a later hostile review replayed fifty against a
// limit of 5, and all fifty passed uncounted); a copy of the batch
// (r.Clone, r.WithContext) keeps the batch's RequestURI, and is the batch
// again unless the batch builds it on rate.CountAgain.
var subBuilds = []struct {
	name string
	kind subKind
	op   func(ctx context.Context, r *http.Request) *http.Request
}{
	{"NewRequestWithContext, another user", subOther, func(ctx context.Context, r *http.Request) *http.Request {
		op, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/op", nil)
		op.RemoteAddr = r.RemoteAddr
		op.Header.Set("X-User", "victim")
		return op
	}},
	{"Clone, another user", subOther, func(ctx context.Context, r *http.Request) *http.Request {
		op := r.Clone(ctx)
		op.URL.Path = "/op"
		op.Header.Set("X-User", "victim")
		return op
	}},
	{"Clone, another address", subOther, func(ctx context.Context, r *http.Request) *http.Request {
		op := r.Clone(ctx)
		op.URL.Path = "/op"
		op.Header.Del("X-User") // keyed by address
		op.RemoteAddr = "192.0.2.99:1"
		return op
	}},
	{"WithContext, another user", subOther, func(ctx context.Context, r *http.Request) *http.Request {
		op := r.WithContext(ctx)
		op.Header = http.Header{"X-User": {"victim"}}
		u := *r.URL
		u.Path = "/op"
		op.URL = &u
		return op
	}},
	{"NewRequestWithContext, the same user", subNew, func(ctx context.Context, r *http.Request) *http.Request {
		op, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/op", nil)
		op.RemoteAddr = r.RemoteAddr
		op.Header.Set("X-User", r.Header.Get("X-User"))
		return op
	}},
	{"WithContext, the same user", subCopy, func(ctx context.Context, r *http.Request) *http.Request {
		op := r.WithContext(ctx) // shares r's header map, keeps its RequestURI
		u := *r.URL
		u.Path = "/op"
		op.URL = &u
		return op
	}},
	{"Clone, the same user", subCopy, func(ctx context.Context, r *http.Request) *http.Request {
		op := r.Clone(ctx) // keeps r's RequestURI
		op.URL.Path = "/op"
		return op
	}},
}

// subKind is what a limiter makes of a sub-request of subBuilds.
type subKind int

const (
	subOther subKind = iota // another client's request: counted as its
	subNew                  // the batch's client's, built anew: counted as its
	subCopy                 // a copy of the batch: the batch again, unless on CountAgain
)

// subMounts are the ways a route mounts one limiter twice: mount builds
// the middleware (a Set or a Tiered once, so that the route mounts the same
// one twice), outer and inner mount it.
var subMounts = []struct {
	name  string
	mount func(l *rate.Limiter) (outer, inner mw)
}{
	{"Handler", func(l *rate.Limiter) (outer, inner mw) { return l.Handler, l.Handler }},
	{"Chain", func(l *rate.Limiter) (outer, inner mw) {
		return porch.Chain(l), porch.Chain(l)
	}},
	{"Set", func(l *rate.Limiter) (outer, inner mw) {
		set := rate.All(l)
		return set.Handler, set.Handler
	}},
	{"Set chain", func(l *rate.Limiter) (outer, inner mw) {
		set := rate.All(l)
		return porch.Chain(set), porch.Chain(set)
	}},
	{"two Sets, chains", func(l *rate.Limiter) (outer, inner mw) {
		return porch.Chain(rate.All(l)), porch.Chain(rate.All(l))
	}},
	{"Handler+Set chain", func(l *rate.Limiter) (outer, inner mw) {
		return l.Handler, porch.Chain(rate.All(l))
	}},
	{"Tiers", func(l *rate.Limiter) (outer, inner mw) {
		tiers := oneTier(rate.Tier(l))
		return tiers.Handler, tiers.Handler
	}},
	{"Tiers chain", func(l *rate.Limiter) (outer, inner mw) {
		tiers := oneTier(rate.Tier(l))
		return porch.Chain(tiers), porch.Chain(tiers)
	}},
	{"Tiers of a Set, chain", func(l *rate.Limiter) (outer, inner mw) {
		tiers := oneTier(rate.All(l))
		return porch.Chain(tiers), porch.Chain(tiers)
	}},
}

// mw is chi's shape of a middleware.
type mw = func(http.Handler) http.Handler

// oneTier is a Tiered whose every request is tier's.
func oneTier(tier rate.Tier) *rate.Tiered {
	one := func(*http.Request) (string, error) { return "one", nil }
	return rate.Tiers(one, map[string]rate.Tier{"one": tier})
}

// mountTwice is h behind both mounts, with a Clone between them.
func mountTwice(mount func(l *rate.Limiter) (outer, inner mw), l *rate.Limiter, between copier, h http.Handler) http.Handler {
	outer, inner := mount(l)
	return outer(between.Handler(inner(h)))
}

// A limiter counts a request once per client key and request-target. A
// batch endpoint that replays operations through its router on its
// request's context has each operation for another client counted as that
// client's, however it built it: ten operations for another user against
// a limit of 3 serve 3, and the rest are 429. An operation for the batch's
// own client built with http.NewRequestWithContext is counted as that
// client's too: 2 served of what the batch left. A copy of the batch
// (r.Clone, r.WithContext: same key, same RequestURI) is the batch again
// and passes uncounted, unless the batch builds it on rate.CountAgain,
// which counts it as a request of its own. Either way each operation is
// counted once, though the route mounts the limiter twice with a Clone
// between; and the batch keeps its own count and headers.
func TestSubRequests(t *testing.T) {
	for _, b := range subBuilds {
		for _, mount := range subMounts {
			for _, again := range []bool{false, true} {
				name := b.name + "/" + mount.name + "/uncounted"
				if again {
					name = b.name + "/" + mount.name + "/CountAgain"
				}
				t.Run(name, func(t *testing.T) {
					rg := newRig(t, 3, time.Hour, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User")}})
					served := 0
					statuses := map[int]int{}
					var router http.Handler
					batch := func(w http.ResponseWriter, r *http.Request) {
						ctx := r.Context()
						if again {
							ctx = rate.CountAgain(ctx)
						}
						for range 10 {
							rec := httptest.NewRecorder()
							router.ServeHTTP(rec, b.op(ctx, r))
							statuses[rec.Code]++
						}
					}
					routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/batch" {
							batch(w, r)
							return
						}
						served++
					})
					// Mounted twice, with a Clone between: each operation
					// is still counted once.
					router = mountTwice(mount.mount, rg.lim, copies[2].cp, routes)
					req := request("192.0.2.1:1")
					req.URL.Path = "/batch"
					req.Header.Set("X-User", "attacker")
					res, body := serve(router, req)

					want := 10 // the batch again, counted once with the batch
					switch {
					case b.kind == subOther:
						want = 3 // the other client's limit
					case b.kind == subNew || again:
						want = 2 // what the batch left of its client's
					}
					if served != want || statuses[http.StatusOK] != want || statuses[http.StatusTooManyRequests] != 10-want {
						t.Errorf("operations served: %d of 10, statuses %v, want %d served and the rest 429", served, statuses, want)
					}
					if res.StatusCode != http.StatusOK {
						t.Fatalf("batch: got status %d (%s), want 200", res.StatusCode, body)
					}
					if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "2" {
						t.Errorf("batch: got X-RateLimit-Remaining %q, want [2]: its own count", got)
					}
				})
			}
		}
	}
}

// The batch of a hostile review: POST /batch replays GET /orders/1 fifty
// times for its own client, each built with http.NewRequestWithContext on
// the batch's context and served through the router, against a limit of 5
// a minute. Each operation is a request of that client's and counted: the
// batch takes one hit, four operations are served and 46 are 429. All
// fifty were served when an operation of the batch's key on the batch's
// context was taken for the batch again. So it goes whether the batch came
// from a server (RequestURI set) or was built in-process (http.NewRequest
// leaves RequestURI empty), and whether the route mounts the limiter once
// or twice with a Clone between.
func TestBatchCountsItsOperations(t *testing.T) {
	outers := []struct {
		name string
		req  func() *http.Request
	}{
		{"from a server", func() *http.Request { return httptest.NewRequest(http.MethodPost, "/batch", nil) }},
		{"built in-process", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, "/batch", nil)
			return r
		}},
	}
	for _, outer := range outers {
		for _, mount := range subMounts {
			for _, twice := range []bool{false, true} {
				name := outer.name + "/" + mount.name + "/once"
				if twice {
					name = outer.name + "/" + mount.name + "/twice"
				}
				t.Run(name, func(t *testing.T) {
					rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User")}})
					var router http.Handler
					mux := http.NewServeMux()
					served := 0
					statuses := map[int]int{}
					mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { served++ })
					mux.HandleFunc("POST /batch", func(w http.ResponseWriter, r *http.Request) {
						for range 50 {
							op, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "/orders/1", nil)
							op.RemoteAddr = r.RemoteAddr
							op.Header.Set("X-User", r.Header.Get("X-User"))
							rec := httptest.NewRecorder()
							router.ServeHTTP(rec, op)
							statuses[rec.Code]++
						}
					})
					if twice {
						router = mountTwice(mount.mount, rg.lim, copies[2].cp, mux)
					} else {
						once, _ := mount.mount(rg.lim)
						router = once(mux)
					}
					req := outer.req()
					req.Header.Set("X-User", "alice")
					res, body := serve(router, req)
					if res.StatusCode != http.StatusOK {
						t.Fatalf("batch: got status %d (%s), want 200", res.StatusCode, body)
					}
					if served != 4 || statuses[http.StatusOK] != 4 || statuses[http.StatusTooManyRequests] != 46 {
						t.Errorf("operations served: %d of 50, statuses %v, want 4 served and 46 429", served, statuses)
					}
					if got := res.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "4" {
						t.Errorf("batch: got X-RateLimit-Remaining %q, want [4]: counted once", got)
					}
				})
			}
		}
	}
}

// A sub-request for another client is given back, or not, as that
// client's own request: Options.CountStatus settles it against its own key
// and its own status, and leaves the batch's client's hit to the batch's
// status. Once, a set's refusal of such an operation gave the batch's hit
// back.
func TestSubRequestsGiveBackTheirOwnKey(t *testing.T) {
	tests := []struct {
		name        string
		limit       int
		countStatus func(int) bool
		victimUsed  int      // the victim's hits before the batch
		ops         []string // the paths of the operations, for the victim
		wantStatus  []int
		wantBatch   int64 // the batch's client's remaining, after
		wantVictim  int64
	}{
		{
			name: "Failures", limit: 5, countStatus: rate.Failures,
			ops:        []string{"/fail", "/ok", "/fail", "/ok"},
			wantStatus: []int{401, 200, 401, 200},
			wantBatch:  5, wantVictim: 3,
		},
		{
			name: "Successes, the victim refused", limit: 2, countStatus: rate.Successes, victimUsed: 2,
			ops:        []string{"/ok", "/ok"},
			wantStatus: []int{429, 429},
			wantBatch:  1, wantVictim: 0,
		},
	}
	for _, tt := range tests {
		for _, mount := range subMounts {
			t.Run(tt.name+"/"+mount.name, func(t *testing.T) {
				rg := newRig(t, tt.limit, time.Hour, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User"), CountStatus: tt.countStatus}})
				for range tt.victimUsed {
					rg.allow(t, "victim")
				}
				var router http.Handler
				var got []int
				routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch r.URL.Path {
					case "/batch":
						for _, path := range tt.ops {
							op, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
							op.Header.Set("X-User", "victim")
							rec := httptest.NewRecorder()
							router.ServeHTTP(rec, op)
							got = append(got, rec.Code)
						}
					case "/fail":
						w.WriteHeader(http.StatusUnauthorized)
					}
				})
				router = mountTwice(mount.mount, rg.lim, copies[2].cp, routes)
				req := request("192.0.2.1:1")
				req.URL.Path = "/batch"
				req.Header.Set("X-User", "attacker")
				if res, body := serve(router, req); res.StatusCode != http.StatusOK {
					t.Fatalf("batch: got status %d (%s), want 200", res.StatusCode, body)
				}
				if !slices.Equal(got, tt.wantStatus) {
					t.Errorf("operations: got statuses %v, want %v", got, tt.wantStatus)
				}
				for _, w := range []struct {
					who  string
					want int64
				}{{"attacker", tt.wantBatch}, {"victim", tt.wantVictim}} {
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

// A dry-run limiter counts another client's sub-requests as that client's
// too, and says so: the fourth of ten operations against a limit of 3
// would have been refused.
func TestSubRequestsDryRun(t *testing.T) {
	for _, mount := range subMounts {
		t.Run(mount.name, func(t *testing.T) {
			rg := newRig(t, 3, time.Hour, rigOptions{rate: rate.Options{KeyFunc: porch.KeyByHeader("X-User"), DryRun: true}})
			var router http.Handler
			var got []string
			routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/batch" {
					return
				}
				for range 10 {
					op := r.Clone(r.Context())
					op.URL.Path = "/op"
					op.Header.Set("X-User", "victim")
					rec := httptest.NewRecorder()
					router.ServeHTTP(rec, op)
					got = append(got, rec.Header().Get("X-RateLimit-Dry-Run"))
				}
			})
			router = mountTwice(mount.mount, rg.lim, copies[2].cp, routes)
			req := request("192.0.2.1:1")
			req.URL.Path = "/batch"
			req.Header.Set("X-User", "attacker")
			serve(router, req)
			want := []string{"allowed", "allowed", "allowed"}
			for range 7 {
				want = append(want, "limited")
			}
			if !slices.Equal(got, want) {
				t.Errorf("operations: got X-RateLimit-Dry-Run %q, want %q", got, want)
			}
		})
	}
}
