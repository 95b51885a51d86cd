//go:build acceptance

package acceptance

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// POST /login (issue 18): the login limiter counts failed attempts only,
// per user and client address (sample/storefront/login.go). Every leg
// lifts -rate-limit out of the way: /login is under the general limiter
// too, which counts every request, successes included.
const (
	loginRight = `{"user":"demo","password":"porch-demo"}`
	loginWrong = `{"user":"demo","password":"guess"}`
	loginBad   = `{"user":"demo",`
)

func loginFlags(limit int, window string) []string {
	return []string{"-login-limit", strconv.Itoa(limit), "-login-window", window, "-rate-limit", "100000"}
}

// wantLogin fails unless r has status want; a 4xx must be problem+json.
func wantLogin(t *testing.T, r reply, want int, what string) {
	t.Helper()
	if want >= 400 {
		checkProblem(t, r, want)
	} else if r.Status != want {
		t.Errorf("%s: got %s, want %d", what, r, want)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkLoginRefusal fails unless r is the login limiter's 429: problem+json,
// Retry-After within the window, and the login policy announced.
func checkLoginRefusal(t *testing.T, r reply, limit int, window time.Duration) {
	t.Helper()
	checkProblem(t, r, http.StatusTooManyRequests)
	secs := int((window + time.Second - 1) / time.Second)
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > secs {
		t.Errorf("429 Retry-After: got %q, want 1..%d", r.Header.Get("Retry-After"), secs)
	}
	if p, want := r.Header.Get("RateLimit-Policy"), fmt.Sprintf(`"login";q=%d;w=%d`, limit, secs); !strings.Contains(p, want) {
		t.Errorf("429 RateLimit-Policy: got %q, want it to hold %s", p, want)
	}
}

// loginCount is the stored count of the login limiter's only counter for
// a user (rows "rate:login:p:…"; a refused body's address-only row is
// "rate:login:ip:…").
func loginCount(t *testing.T, db string) int64 {
	t.Helper()
	var rows []counterRow
	for _, c := range counters(t, db) {
		if strings.HasPrefix(c.Key, "rate:login:p:") {
			rows = append(rows, c)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("login counters: got %+v, want one", rows)
	}
	return rows[0].Count
}

// (a) Successes are not counted, failures are: with -login-limit 3, twenty
// right passwords are all 200 and leave the whole budget; three wrong ones
// are 401, and the attempt after them is 429 even with the right password.
// A body that is no login is 400 and charged to the address alone.
func TestLoginCountsFailuresOnly(t *testing.T) {
	t.Parallel()
	const limit, window = 3, time.Hour
	s := startStorefront(t, newDB(t), loginFlags(limit, "1h")...)
	wantLogin(t, s.post(t, "/login", loginBad), http.StatusBadRequest, "malformed body")
	for i := range 20 {
		wantLogin(t, s.post(t, "/login", loginRight), http.StatusOK, fmt.Sprintf("success %d", i+1))
	}
	for i := range limit {
		wantLogin(t, s.post(t, "/login", loginWrong), http.StatusUnauthorized, fmt.Sprintf("failure %d", i+1))
	}
	checkLoginRefusal(t, s.post(t, "/login", loginRight), limit, window)
	checkLoginRefusal(t, s.post(t, "/login", loginWrong), limit, window)
	s.stop(t)
	if n := loginCount(t, s.db); n != limit {
		t.Errorf("login counter after SIGTERM: got %d, want the %d failures", n, limit)
	}
	t.Logf("400, 20×200, %d×401, then 429 with the right password", limit)
}

// (b) Exact under parallel attempts from one client, limit 5.
//
// Every attempt is counted before its handler runs and a success is given
// back only after it has answered, so while 5 attempts are in their
// handlers the 6th is refused whatever its password: 50 parallel right
// passwords get at least 5×200, any others 429 (how many depends on how
// the 50 overlap, up to 45 if all arrive before any is answered), and
// never a 401. Once they are answered they have given everything back:
// 50 parallel wrong passwords after them get exactly 5×401 (the handler
// ran 5 times) and 45×429, and the stored count is 5.
func TestLoginParallelExact(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 5, 50, time.Hour
	s := startStorefront(t, newDB(t), loginFlags(limit, "1h")...)
	s.warm(t, burst)

	right := statuses(parallel(burst, func(int) reply { return s.try(http.MethodPost, "/login", loginRight) }))
	if right[http.StatusOK] < limit || right[http.StatusOK]+right[http.StatusTooManyRequests] != burst {
		t.Fatalf("%d parallel right passwords, limit %d: got %v, want at least %d×200 and the rest 429", burst, limit, right, limit)
	}

	s.warm(t, burst)
	rs := parallel(burst, func(int) reply { return s.try(http.MethodPost, "/login", loginWrong) })
	wrong := statuses(rs)
	if wrong[http.StatusUnauthorized] != limit || wrong[http.StatusTooManyRequests] != burst-limit {
		t.Fatalf("%d parallel wrong passwords after them, limit %d: got %v, want exactly %d×401 and %d×429", burst, limit, wrong, limit, burst-limit)
	}
	for _, r := range rs {
		if r.Status == http.StatusTooManyRequests {
			checkLoginRefusal(t, r, limit, window)
		}
	}
	s.stop(t)
	if n := loginCount(t, s.db); n != limit {
		t.Errorf("login counter after SIGTERM: got %d, want %d", n, limit)
	}
	t.Logf("%d parallel right: %v; then %d parallel wrong: %v", burst, right, burst, wrong)
}

// (c) Kept across restarts. SIGTERM: 5 successes and 2 failures store a
// count of 2 (the successes' give-backs are durable too); after a restart
// the 3rd failure is 401 and the next attempt, right password or not, 429,
// through another SIGTERM restart and a kill -9 restart.
func TestLoginRestartSIGTERM(t *testing.T) {
	t.Parallel()
	const limit, window = 3, time.Hour
	flags := loginFlags(limit, "1h")
	a := startStorefront(t, newDB(t), flags...)
	for range 5 {
		wantLogin(t, a.post(t, "/login", loginRight), http.StatusOK, "success")
	}
	for range 2 {
		wantLogin(t, a.post(t, "/login", loginWrong), http.StatusUnauthorized, "failure")
	}
	a.stop(t)
	if n := loginCount(t, a.db); n != 2 {
		t.Fatalf("login counter after SIGTERM: got %d, want 2 (the failures only)", n)
	}

	b := startStorefront(t, a.db, flags...)
	wantLogin(t, b.post(t, "/login", loginWrong), http.StatusUnauthorized, "3rd failure after restart")
	checkLoginRefusal(t, b.post(t, "/login", loginRight), limit, window)
	b.stop(t)

	c := startStorefront(t, a.db, flags...)
	checkLoginRefusal(t, c.post(t, "/login", loginRight), limit, window)
	c.kill(t)

	d := startStorefront(t, a.db, flags...)
	checkLoginRefusal(t, d.post(t, "/login", loginRight), limit, window)
	t.Logf("5×200, 2×401, SIGTERM (count 2), 401, 429, SIGTERM: 429, kill -9: 429")
}

// (c) kill -9 right after the 3rd failure's 401: a failure is answered only
// once its count is committed, so the restarted storefront refuses the
// next attempt, right password included.
func TestLoginRestartKill9(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testLoginRestartKill9)
}

func testLoginRestartKill9(t *testing.T, durability []string) {
	const limit, window = 3, time.Hour
	flags := with(loginFlags(limit, "1h"), durability...)
	a := startStorefront(t, newDB(t), flags...)
	wantLogin(t, a.post(t, "/login", loginRight), http.StatusOK, "success")
	for range limit {
		wantLogin(t, a.post(t, "/login", loginWrong), http.StatusUnauthorized, "failure")
	}
	a.kill(t)

	b := startStorefront(t, a.db, flags...)
	checkLoginRefusal(t, b.post(t, "/login", loginRight), limit, window)
	if n := loginCount(t, a.db); n < limit {
		t.Errorf("login counter after kill -9: got %d, want at least %d", n, limit)
	}
	t.Logf("200, %d×401, kill -9, restart: 429", limit)
}

// What applies to /login besides: the general limiter (-rate-limit per
// client) counts every request, successes included, once; its 429 is its
// own policy's.
func TestLoginUnderGeneralLimit(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t), "-rate-limit", "3", "-rate-window", "1h", "-login-limit", "5")
	for range 3 {
		wantLogin(t, s.post(t, "/login", loginRight), http.StatusOK, "success")
	}
	r := s.post(t, "/login", loginRight)
	checkProblem(t, r, http.StatusTooManyRequests)
	if p := r.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"default";q=3;w=3600`) {
		t.Errorf("429 RateLimit-Policy: got %q, want the general policy in it", p)
	}
	if r.Header.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("429 X-RateLimit-Limit: got %q, want the general limit 3", r.Header.Get("X-RateLimit-Limit"))
	}
}
