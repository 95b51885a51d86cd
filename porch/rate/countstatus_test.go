package rate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// login is a login-like handler: 200 for a request with ?ok, 401 otherwise.
// It counts its runs.
type login struct{ runs atomic.Int64 }

func (h *login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	if r.URL.Query().Has("ok") {
		w.Write([]byte("welcome"))
		return
	}
	http.Error(w, "wrong password", http.StatusUnauthorized)
}

// attempt is a login attempt by user; ok picks a right password.
func attempt(user string, ok bool) *http.Request {
	target := "/login"
	if ok {
		target += "?ok"
	}
	r := httptest.NewRequest(http.MethodPost, target, nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-User", user)
	return r
}

// byUser keys attempts by the X-User header, so that Peek and Reset reach
// their counter by the user's name.
var byUser = porch.KeyByHeader("X-User")

// checkOnlyFailuresCount runs a login limiter of 3 with CountStatus
// Failures, wired both ways: successful logins are given back, failed ones
// stand, and once three have failed every attempt is refused without
// running the handler, right password or not.
func checkOnlyFailuresCount(t *testing.T, lim *rate.Limiter, wrap func(*rate.Limiter, http.Handler) http.Handler, user string) {
	t.Helper()
	ctx := context.Background()
	h := &login{}
	handler := wrap(lim, h)
	for i, ok := range []bool{true, false, true, false, true} {
		if res, body := serve(handler, attempt(user, ok)); (ok && res.StatusCode != 200) || (!ok && res.StatusCode != 401) {
			t.Fatalf("attempt %d (ok %v): got %d %s", i+1, ok, res.StatusCode, body)
		}
	}
	// Three successes given back, two failures standing.
	if v, err := lim.Peek(ctx, user); err != nil || v.Remaining != 1 {
		t.Fatalf("after 3 successes and 2 failures: got %+v, %v; want 1 remaining", v, err)
	}
	if res, _ := serve(handler, attempt(user, false)); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("third failure: got %d, want 401", res.StatusCode)
	}
	for _, ok := range []bool{true, false} {
		if res, _ := serve(handler, attempt(user, ok)); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after 3 failures (ok %v): got %d, want 429", ok, res.StatusCode)
		}
	}
	if got := h.runs.Load(); got != 6 {
		t.Fatalf("handler ran %d times, want 6 (refused attempts run nothing)", got)
	}
	if v, err := lim.Peek(ctx, user); err != nil || v.Remaining != 0 {
		t.Fatalf("after 3 failures: got %+v, %v; want 0 remaining", v, err)
	}
}

// Only the failed logins count: the successful ones are given back after
// their handler answered 200.
func TestCountStatusFailuresOnly(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 3, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures}})
			checkOnlyFailuresCount(t, rg.lim, w.wrap, "ann")
		})
	}
}

// checkCountedBeforeHandler sends 50 attempts at once to a limit of 5,
// whose handlers block until every refused one has been answered: exactly
// 5 handlers run, since each hit holds its room while its handler runs,
// even those whose status will not count. Then it lets them answer
// status and reports how many were counted after them.
func checkCountedBeforeHandler(t *testing.T, lim *rate.Limiter, wrap func(*rate.Limiter, http.Handler) http.Handler, user string, status int) {
	t.Helper()
	const attempts, limit = 50, 5
	var entered atomic.Int64
	release := make(chan struct{})
	handler := wrap(lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		<-release
		w.WriteHeader(status)
	}))
	codes := make(chan int, attempts)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range attempts {
		wg.Go(func() {
			<-start
			res, _ := serve(handler, attempt(user, false))
			codes <- res.StatusCode
		})
	}
	close(start)
	refused := 0
	timeout := time.After(20 * time.Second)
	for refused < attempts-limit {
		select {
		case c := <-codes:
			if c != http.StatusTooManyRequests {
				t.Fatalf("an attempt answered %d while %d handlers held the limit, want 429", c, entered.Load())
			}
			refused++
		case <-timeout:
			t.Fatalf("%d refused, %d handlers running after 20s; want %d and %d", refused, entered.Load(), attempts-limit, limit)
		}
	}
	// Every attempt is decided: the 5 allowed reach their handlers.
	for deadline := time.Now().Add(20 * time.Second); entered.Load() < limit && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := entered.Load(); got != limit {
		t.Fatalf("%d handlers ran while the others were refused, want exactly %d", got, limit)
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != status {
			t.Errorf("a served attempt answered %d, want %d", c, status)
		}
	}
}

// The hit is counted before the handler runs: 50 parallel attempts at a
// limit of 5 run exactly 5 handlers, whether their status will count or
// not; afterwards the successful ones are all given back and the failed
// ones all stand.
func TestCountStatusCountsBeforeTheHandler(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures}})
			ctx := context.Background()
			checkCountedBeforeHandler(t, rg.lim, w.wrap, "ok", http.StatusOK)
			if v, err := rg.lim.Peek(ctx, "ok"); err != nil || v.Remaining != 5 {
				t.Fatalf("after 5 successful attempts: got %+v, %v; want all 5 given back", v, err)
			}
			checkCountedBeforeHandler(t, rg.lim, w.wrap, "bad", http.StatusUnauthorized)
			if v, err := rg.lim.Peek(ctx, "bad"); err != nil || v.Remaining != 0 {
				t.Fatalf("after 5 failed attempts: got %+v, %v; want 0 remaining", v, err)
			}
		})
	}
}

// The status decided on is the one the client gets: a handler that writes
// nothing answered 200, one that panics 500 (under porch.Chain the chain's
// own 500, under Handler the answer a recovering middleware gives).
func TestCountStatusPanicsAndSilence(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 5, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.UnlessServerError}})
			ctx := context.Background()
			silent := w.wrap(rg.lim, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			panics := w.wrap(rg.lim, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
			serve(silent, attempt("sam", false)) // 200: stands
			func() {
				defer func() { recover() }() // Handler lets the panic go on
				serve(panics, attempt("sam", false))
			}() // 500: given back
			if v, err := rg.lim.Peek(ctx, "sam"); err != nil || v.Remaining != 4 {
				t.Fatalf("after a silent 200 and a panic: got %+v, %v; want 4 remaining (the panic given back)", v, err)
			}
		})
	}
}

// A limiter's CountStatus holds in a set: its hits are given back by the
// set's status, the other limiter's stand.
func TestCountStatusInSet(t *testing.T) {
	rg := newRig(t, 3, time.Minute, rigOptions{rate: rate.Options{Name: "fail", KeyFunc: byUser, CountStatus: rate.Failures}})
	all, err := rate.New(rg.pool, rg.st, 10, time.Minute, rate.Options{Name: "all", KeyFunc: byUser})
	if err != nil {
		t.Fatal(err)
	}
	set := rate.All(rg.lim, all)
	ctx := context.Background()
	for name, wrap := range map[string]func(http.Handler) http.Handler{"porch.Chain": porch.Chain(set), "Set.Handler": set.Handler} {
		t.Run(name, func(t *testing.T) {
			user := "set-" + name
			h := wrap(&login{})
			for _, ok := range []bool{true, true, false} {
				serve(h, attempt(user, ok))
			}
			if v, err := rg.lim.Peek(ctx, user); err != nil || v.Remaining != 2 {
				t.Fatalf("failure limiter: got %+v, %v; want 2 remaining (1 failure of 3 attempts)", v, err)
			}
			if v, err := all.Peek(ctx, user); err != nil || v.Remaining != 7 {
				t.Fatalf("plain limiter: got %+v, %v; want 7 remaining (every attempt)", v, err)
			}
		})
	}
}

// In DryRun a hit whose status does not count is given back too: the
// counts stay what enforcing would count.
func TestCountStatusDryRun(t *testing.T) {
	rg := newRig(t, 1, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures, DryRun: true}})
	h := rg.lim.Handler(&login{})
	for range 3 {
		if res, _ := serve(h, attempt("dee", true)); res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Dry-Run") != "allowed" {
			t.Fatalf("dry run, successful login: got %d, dry run %q; want 200, allowed", res.StatusCode, res.Header.Get("X-RateLimit-Dry-Run"))
		}
	}
	if v, err := rg.lim.Peek(context.Background(), "dee"); err != nil || v.Remaining != 1 {
		t.Fatalf("dry run after successes: got %+v, %v; want 1 remaining", v, err)
	}
}
