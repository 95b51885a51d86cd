package rate_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
)

// A login handler that sends 103 Early Hints before its 401 has failed:
// the informational status is not the final one. Under porch.Chain the
// buffered writer records 103 as the status and drops the 401, so
// Failures(103) is false and the failed attempt is given back: unlimited
// password guesses (and the client gets the 401 body under a 200).
func TestEarlyHintsDoNotHideAFailure(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 2, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures}})
			h := w.wrap(rg.lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				http.Error(w, "wrong password", http.StatusUnauthorized)
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			runs := 0
			for i := range 6 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", nil)
				req.Header.Set("X-User", "eve")
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusTooManyRequests {
					break
				}
				runs++
				if res.StatusCode != http.StatusUnauthorized {
					t.Errorf("attempt %d: client got final status %d, want 401", i+1, res.StatusCode)
				}
			}
			if runs > 2 {
				t.Fatalf("%d failed logins ran against a limit of 2 failures", runs)
			}
		})
	}
}

// A hit counted before a Reset, given back after it (the handler resets
// the key, as a successful login does, and fresh failures fill the new
// window meanwhile): the give-back must not come out of the new window.
func TestGiveBackAfterResetStaysInItsEpoch(t *testing.T) {
	for _, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			rg := newRig(t, 2, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures}})
			ctx := context.Background()
			inner := w.wrap(rg.lim, &login{})
			slow := w.wrap(rg.lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := rg.lim.Reset(ctx, "zed"); err != nil {
					t.Error(err)
				}
				for range 2 { // two failures in the new window: full
					serve(inner, attempt("zed", false))
				}
				w.Write([]byte("welcome")) // 200: this hit is given back
			}))
			serve(slow, attempt("zed", true))
			if v, err := rg.lim.Peek(ctx, "zed"); err != nil || v.Remaining != 0 {
				t.Fatalf("after reset + 2 failures, old epoch's give-back: got %+v, %v; want 0 remaining", v, err)
			}
		})
	}
}

// The same across a window roll: a slow success counted in one window,
// given back after the window closed and a new one filled.
func TestGiveBackAfterWindowRoll(t *testing.T) {
	for _, alg := range []rate.Algorithm{rate.FixedWindow, rate.SlidingWindow, rate.GCRA} {
		for _, w := range wirings {
			t.Run(alg.String()+"/"+w.name, func(t *testing.T) {
				rg := newRig(t, 2, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Failures, Algorithm: alg}})
				inner := w.wrap(rg.lim, &login{})
				slow := w.wrap(rg.lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					rg.clock.Advance(3 * time.Minute)
					n := 0
					for range 4 {
						if res, _ := serve(inner, attempt("roll", false)); res.StatusCode == http.StatusUnauthorized {
							n++
						}
					}
					if n != 2 {
						t.Errorf("new window allowed %d failures, want 2", n)
					}
					w.Write([]byte("welcome"))
				}))
				serve(slow, attempt("roll", true))
				if res, _ := serve(inner, attempt("roll", false)); res.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("after the roll and 2 failures, a stale give-back freed room: got %d, want 429", res.StatusCode)
				}
			})
		}
	}
}

// porch.Chain(lim, lim) and Handler outside Chain: one count, one settle.
func TestDoubleMountGivesBackOnce(t *testing.T) {
	rg := newRig(t, 3, time.Minute, rigOptions{rate: rate.Options{KeyFunc: byUser, CountStatus: rate.Successes}})
	ctx := context.Background()
	// Successes: a 401 is given back; a 200 stands.
	for name, h := range map[string]http.Handler{
		"chain-twice":      porch.Chain(rg.lim, rg.lim)(&login{}),
		"handler-in-chain": porch.Chain(rg.lim)(rg.lim.Handler(&login{})),
		"chain-in-handler": rg.lim.Handler(porch.Chain(rg.lim)(&login{})),
		"set-in-handler":   rg.lim.Handler(rate.All(rg.lim).Handler(&login{})),
		"handler-in-set":   porch.Chain(rate.All(rg.lim))(rg.lim.Handler(&login{})),
	} {
		t.Run(name, func(t *testing.T) {
			user := "dm-" + name
			serve(h, attempt(user, true))  // stands: 1
			serve(h, attempt(user, true))  // stands: 2
			serve(h, attempt(user, false)) // given back once
			if v, err := rg.lim.Peek(ctx, user); err != nil || v.Remaining != 1 {
				t.Fatalf("got %+v, %v; want 1 remaining (2 standing, the 401 given back once)", v, err)
			}
		})
	}
}
