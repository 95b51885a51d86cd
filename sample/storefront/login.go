package main

// POST /login: "count only failures" (issue 18). A fixed demo account
// answers 200; a wrong password or an unknown user 401; a body that is not
// a login 400 (413 over maxLoginBody). The login limiter, Name "login",
// allows -login-limit failed attempts per -login-window per user and
// client address, with rate.Options{CountStatus: rate.Failures}: every
// attempt is counted before the handler runs and given back after it when
// it answered below 400, so successes cost nothing once they are answered,
// and 400s and 413s are failed attempts like 401s. Over the limit: 429
// with Retry-After, whatever the password. The route is also under the
// general limiter (-rate-limit per client, every request), combined with
// the login one by rate.All, so that each counts a request once and a 429
// from either gives the other's hit back.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// The demo account, the only one: documented in the README.
const (
	demoUser     = "demo"
	demoPassword = "porch-demo"
)

const (
	// maxLoginBody caps what /login reads, before the limiter counts (its
	// key needs the user): a login is two short strings.
	maxLoginBody = 4 << 10
	// maxLoginUser bounds the user, which goes into the counter key.
	maxLoginUser = 64
	// loginLimiterName scopes the login counters in the store and names
	// the policy in RateLimit-Policy.
	loginLimiterName = "login"
)

type loginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// loginBody is a /login body as readLogin decoded it: the request, or the
// problem to answer.
type loginBody struct {
	req loginRequest
	bad *porch.Problem
}

type loginBodyKey struct{}

// readLogin decodes the body, capped at maxLoginBody, once, before the
// limiter, and hands it on in the context: the limiter's KeyFunc
// (loginUser) reads the user from there and the handler the rest. It
// answers nothing itself, so that a malformed body reaches the limiter and
// is counted as the failed attempt it is; and r.Body is not rewound for a
// second reader, so the KeyFunc is a pure lookup. A body whose connection
// failed while it was read (it stalled past the server's read timeout, or
// the client went away) is the exception: net/http has ended the request
// (its context is cancelled), so it is answered here, 408 or 400, as no
// attempt at all.
func readLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, broken := decodeLoginBody(w, r)
		if broken {
			b.bad.Write(w)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loginBodyKey{}, b)))
	})
}

// decodeLoginBody decodes r's body, and reports whether its connection
// failed while it was read.
func decodeLoginBody(w http.ResponseWriter, r *http.Request) (b *loginBody, broken bool) {
	rd := &bodyReader{r: http.MaxBytesReader(w, r.Body, maxLoginBody)}
	req, bad := decodeLogin(rd)
	return &loginBody{req: req, bad: bad}, rd.broken()
}

// decodeLogin reads one JSON object {"user", "password"}, both non-empty
// strings, the user at most maxLoginUser bytes, and nothing after it; it
// returns the problem to answer otherwise (see decodeCheckout).
func decodeLogin(body io.Reader) (loginRequest, *porch.Problem) {
	var req loginRequest
	rd := &bodyReader{r: body}
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return loginRequest{}, rd.problem("the body must be a JSON object {\"user\": string, \"password\": string}: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return loginRequest{}, rd.problem("the body must hold one JSON object and nothing after it")
	}
	if req.User == "" || req.Password == "" || len(req.User) > maxLoginUser {
		return loginRequest{}, badRequest("invalid-login", fmt.Sprintf("user (at most %d bytes) and password are required", maxLoginUser))
	}
	return req, nil
}

// loginUser is the login limiter's user part of the key: the body's user,
// or "" when the body was refused, so that porch.JoinKeys counts the attempt
// against the client address alone (no user could be read; a malformed
// body must not be charged to any account).
func loginUser(r *http.Request) (string, error) {
	if b, _ := r.Context().Value(loginBodyKey{}).(*loginBody); b != nil && b.bad == nil {
		return b.req.User, nil
	}
	return "", nil
}

// newLoginLimiter is the login limiter: a fixed window (the classic "5
// failures per 15 minutes", whatever -rate-algorithm says) on the shop's
// store, keyed by user and client address, counting failures only.
func newLoginLimiter(cfg config, pool *porch.Pool, st driver.Counters, obs rate.Observer) (*rate.Limiter, error) {
	addr := porch.KeyByIP
	if cfg.trustProxy {
		addr = porch.KeyByClientIP
	}
	return rate.New(pool, st, cfg.loginLimit, cfg.loginWindow, rate.Options{
		Name:        loginLimiterName,
		KeyFunc:     porch.JoinKeys(loginUser, addr),
		CountStatus: rate.Failures,
		TrustProxy:  cfg.trustProxy, // the address-only key of a refused body
		WriteAhead:  cfg.writeAhead(),
		Observer:    obs,
	})
}

// login checks the demo account: 200 for it, 401 for anything else, the
// same answer for a wrong password and an unknown user.
func (s *shop) login(w http.ResponseWriter, r *http.Request) {
	b, _ := r.Context().Value(loginBodyKey{}).(*loginBody)
	if b == nil { // mounted without readLogin
		b, _ = decodeLoginBody(w, r)
	}
	if b.bad != nil {
		b.bad.Write(w)
		return
	}
	// Both compared in constant time, both always: the answer's timing
	// tells neither whether the user exists nor how much of the password
	// matched.
	userOK := subtle.ConstantTimeCompare([]byte(b.req.User), []byte(demoUser))
	passOK := subtle.ConstantTimeCompare([]byte(b.req.Password), []byte(demoPassword))
	if userOK&passOK != 1 {
		porch.Problem{Type: problemBase + "login-failed", Title: "Unauthorized", Status: http.StatusUnauthorized,
			Detail: "unknown user or wrong password"}.Write(w)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, struct {
		User     string    `json:"user"`
		LoggedIn time.Time `json:"logged_in"`
	}{b.req.User, time.Now().UTC()})
}
