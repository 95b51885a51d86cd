package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDecodeLogin(t *testing.T) {
	long := `{"user":"demo","password":"` + strings.Repeat("x", maxLoginBody) + `"}`
	tests := []struct {
		name       string
		body       string
		wantStatus int // 0: accepted
	}{
		{"login", `{"user":"demo","password":"porch-demo"}`, 0},
		{"wrong password is still a login", `{"user":"demo","password":"nope"}`, 0},
		{"user at the bound", `{"user":"` + strings.Repeat("u", maxLoginUser) + `","password":"p"}`, 0},
		{"user over the bound", `{"user":"` + strings.Repeat("u", maxLoginUser+1) + `","password":"p"}`, http.StatusBadRequest},
		{"no user", `{"password":"porch-demo"}`, http.StatusBadRequest},
		{"no password", `{"user":"demo"}`, http.StatusBadRequest},
		{"empty password", `{"user":"demo","password":""}`, http.StatusBadRequest},
		{"unknown field", `{"user":"demo","password":"porch-demo","otp":1}`, http.StatusBadRequest},
		{"user not a string", `{"user":1,"password":"porch-demo"}`, http.StatusBadRequest},
		{"trailing garbage", `{"user":"demo","password":"porch-demo"} x`, http.StatusBadRequest},
		{"not JSON", `user=demo&password=porch-demo`, http.StatusBadRequest},
		{"empty", ``, http.StatusBadRequest},
		{"over the cap", long, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(tc.body))
			b, _ := decodeLoginBody(httptest.NewRecorder(), r)
			switch {
			case tc.wantStatus == 0 && b.bad != nil:
				t.Fatalf("got %d %s, want it accepted", b.bad.Status, b.bad.Detail)
			case tc.wantStatus != 0 && b.bad == nil:
				t.Fatalf("got %+v accepted, want %d", b.req, tc.wantStatus)
			case tc.wantStatus != 0 && b.bad.Status != tc.wantStatus:
				t.Fatalf("got %d %s, want %d", b.bad.Status, b.bad.Detail, tc.wantStatus)
			}
		})
	}
}

// The route as the shop mounts it, on a SQLite file, in process: successes
// cost nothing, failures (401, and 400 for a body that is no login) are
// counted per user and client address, and the attempt after the limit is
// 429 with Retry-After even with the right password.
func TestLoginRoute(t *testing.T) {
	cfg, err := parseFlags([]string{"-db", filepath.Join(t.TempDir(), "sf.db"), "-login-limit", "3", "-login-window", "1m"})
	if err != nil {
		t.Fatal(err)
	}
	app, err := newShop(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	post := func(addr, body string) *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
		r.RemoteAddr = addr + ":40000"
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w
	}
	want := func(w *httptest.ResponseRecorder, status int, what string) {
		t.Helper()
		if w.Code != status {
			t.Fatalf("%s: got %d %s, want %d", what, w.Code, strings.TrimSpace(w.Body.String()), status)
		}
		if status >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: Content-Type %q, want application/problem+json", what, w.Header().Get("Content-Type"))
		}
	}
	const (
		right   = `{"user":"demo","password":"porch-demo"}`
		wrong   = `{"user":"demo","password":"guess"}`
		unknown = `{"user":"eve","password":"porch-demo"}`
		bad     = `{"user":"demo"`
	)

	for i := range 10 {
		w := post("192.0.2.1", right)
		want(w, http.StatusOK, "success "+strconv.Itoa(i+1))
		var got struct{ User string }
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.User != demoUser {
			t.Fatalf("success body: %s (%v)", w.Body, err)
		}
	}
	for i := range 3 {
		want(post("192.0.2.1", wrong), http.StatusUnauthorized, "failure "+strconv.Itoa(i+1))
	}
	w := post("192.0.2.1", right)
	want(w, http.StatusTooManyRequests, "right password after 3 failures")
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After: got %q, want 1..60", w.Header().Get("Retry-After"))
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"login";q=3;w=60`) {
		t.Errorf("RateLimit-Policy: got %q, want the login policy", p)
	}
	// Per user and address: the same user from another address, and
	// another user from this one, have counters of their own.
	want(post("192.0.2.2", right), http.StatusOK, "same user, another address")
	want(post("192.0.2.1", unknown), http.StatusUnauthorized, "unknown user, same address")

	// A body that is no login is a failed attempt too, counted against the
	// address alone: it uses up neither the user's counter nor a success.
	for i := range 3 {
		want(post("192.0.2.3", bad), http.StatusBadRequest, "bad body "+strconv.Itoa(i+1))
	}
	want(post("192.0.2.3", right), http.StatusOK, "login after 3 bad bodies")
	want(post("192.0.2.3", bad), http.StatusTooManyRequests, "4th bad body")
}

func TestParseFlagsLogin(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.loginLimit != 5 || c.loginWindow != 15*time.Minute {
		t.Errorf("defaults: got -login-limit %d -login-window %s, want 5 and 15m", c.loginLimit, c.loginWindow)
	}
	c, err = parseFlags([]string{"-login-limit", "3", "-login-window=90s"})
	if err != nil || c.loginLimit != 3 || c.loginWindow != 90*time.Second {
		t.Errorf("got %d %s %v, want 3 1m30s", c.loginLimit, c.loginWindow, err)
	}
}

// loginFlagErrors are refused login command lines, as flagErrors.
var loginFlagErrors = []struct {
	args []string
	want string
}{
	{[]string{"-login-limit", "0"}, `-login-limit must be between 1 and 1099511627776, got 0`},
	{[]string{"-login-limit", "-5"}, `-login-limit must be between 1 and 1099511627776, got -5`},
	{[]string{"-login-limit", "1099511627777"}, `-login-limit must be between 1 and 1099511627776, got 1099511627777`},
	{[]string{"-login-window", "0"}, `-login-window must be between 1ms and 876000h0m0s, got 0s`},
	{[]string{"-login-window", "999us"}, `-login-window must be between 1ms and 876000h0m0s, got 999µs`},
	{[]string{"-login-window", "-1m"}, `-login-window must be between 1ms and 876000h0m0s, got -1m0s`},
}

// Each refused login command line exits 2 with its one line, through main
// in a child process (see TestStartupErrorExit2, which the child runs).
func TestLoginFlagErrorsExit2(t *testing.T) {
	for _, tt := range loginFlagErrors {
		if _, err := parseFlags(tt.args); err == nil || errors.Is(err, errFlagSyntax) || err.Error() != tt.want {
			t.Errorf("parseFlags(%q): got %v, want %q", tt.args, err, tt.want)
		}
		wantRefused(t, tt.args, tt.want)
	}
}
