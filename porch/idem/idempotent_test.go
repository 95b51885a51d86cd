package idem_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

func TestNewPanicsOnBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		noPool  bool
		noStore bool
		opt     idem.Options
	}{
		{name: "nil pool", noPool: true},
		{name: "nil store", noStore: true},
		{name: "negative TTL", opt: idem.Options{TTL: -time.Second}},
		{name: "negative MaxBody", opt: idem.Options{MaxBody: -1}},
		{name: "negative MaxWait", opt: idem.Options{MaxWait: -time.Second}},
		{name: "KeepHeaders: not a field name", opt: idem.Options{KeepHeaders: []string{"Location:"}}},
		{name: "KeepHeaders: Set-Cookie", opt: idem.Options{KeepHeaders: []string{"set-cookie"}}},
		{name: "KeepHeaders: Retry-After", opt: idem.Options{KeepHeaders: []string{"Location", "Retry-After"}}},
		{name: "negative MaxStoredBody", opt: idem.Options{MaxStoredBody: -1}},
		{name: "KeyHeader: not a field name", opt: idem.Options{KeyHeader: "Idempotency Key"}},
		{name: "ReplayedHeader: not a field name", opt: idem.Options{ReplayedHeader: "Replayed:"}},
		{name: "ReplayedHeader: Content-Type", opt: idem.Options{ReplayedHeader: "content-type"}},
		{name: "ReplayedHeader: Set-Cookie", opt: idem.Options{ReplayedHeader: "Set-Cookie"}},
		{name: "KeepHeaders: the replay marker", opt: idem.Options{ReplayedHeader: "Idempotent-Replayed",
			KeepHeaders: []string{"idempotent-replayed"}}},
		{name: "ProblemBase not a URI", opt: idem.Options{ProblemBase: "https://example.test/%zz/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st driver.KeyStore = openStore(t, store.Options{})
			pool := newPool(t, porch.PoolOptions{Size: 1})
			if tc.noStore {
				st = nil
			}
			if tc.noPool {
				pool = nil
			}
			defer func() {
				v := recover()
				msg, ok := v.(string)
				if !ok || !strings.HasPrefix(msg, "idem: ") {
					t.Errorf("panic: got %v, want a string with the prefix %q", v, "idem: ")
				}
			}()
			idem.New(pool, st, tc.opt)
		})
	}
}

// TestMethodsAndRequireKey sends each request twice and counts executions:
// a covered, keyed method runs once; anything the middleware does not cover
// runs every time.
func TestMethodsAndRequireKey(t *testing.T) {
	tests := []struct {
		name      string
		opt       idem.Options
		method    string
		keys      []string
		want      int    // status of both requests
		wantType  string // problem type when refused
		wantCalls int64
	}{
		{"POST keyed", idem.Options{}, http.MethodPost, []string{"k"}, http.StatusCreated, "", 1},
		{"PATCH keyed", idem.Options{}, http.MethodPatch, []string{"k"}, http.StatusCreated, "", 1},
		{"POST without key, not required", idem.Options{}, http.MethodPost, nil, http.StatusCreated, "", 2},
		{"POST without key, required", idem.Options{RequireKey: true}, http.MethodPost, nil,
			http.StatusBadRequest, idem.ProblemKeyRequired, 0},
		{"PATCH without key, required", idem.Options{RequireKey: true}, http.MethodPatch, nil,
			http.StatusBadRequest, idem.ProblemKeyRequired, 0},
		{"GET keyed is not covered", idem.Options{}, http.MethodGet, []string{"k"}, http.StatusCreated, "", 2},
		{"GET without key, required", idem.Options{RequireKey: true}, http.MethodGet, nil, http.StatusCreated, "", 2},
		{"PUT keyed is not covered", idem.Options{}, http.MethodPut, []string{"k"}, http.StatusCreated, "", 2},
		{"DELETE with a bad key is not covered", idem.Options{RequireKey: true}, http.MethodDelete, []string{""},
			http.StatusCreated, "", 2},
		{"Methods: PUT keyed", idem.Options{Methods: []string{http.MethodPut}}, http.MethodPut, []string{"k"},
			http.StatusCreated, "", 1},
		{"Methods: PUT without key, required", idem.Options{Methods: []string{http.MethodPut}, RequireKey: true},
			http.MethodPut, nil, http.StatusBadRequest, idem.ProblemKeyRequired, 0},
		{"Methods: POST no longer covered", idem.Options{Methods: []string{http.MethodPut}, RequireKey: true},
			http.MethodPost, []string{"k"}, http.StatusCreated, "", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: tc.opt}, o)
			for i := range 2 {
				got := e.do(t, tc.method, "/orders", "one", tc.keys...)
				if tc.wantType != "" {
					wantProblem(t, got, tc.want, tc.wantType)
					continue
				}
				if got.status != tc.want {
					t.Errorf("request %d: got %s, want %d", i+1, got, tc.want)
				}
			}
			if got := o.calls.Load(); got != tc.wantCalls {
				t.Errorf("handler calls: got %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{}, o)

	first := e.do(t, http.MethodPost, "/orders?sku=1", `{"qty":2}`, "k1")
	if first.status != http.StatusCreated {
		t.Fatalf("first: got %s, want 201", first)
	}
	if first.replayed() {
		t.Errorf("first %s: got %q, want it absent", idem.ReplayedHeader, first.header.Get(idem.ReplayedHeader))
	}
	// The handler did set them; a replay must not repeat them.
	for _, h := range []string{"Set-Cookie", "X-Custom"} {
		if first.header.Get(h) == "" {
			t.Fatalf("first %s: got none, want the handler's", h)
		}
	}

	for i := range 3 {
		got := e.do(t, http.MethodPost, "/orders?sku=1", `{"qty":2}`, "k1")
		if got.status != first.status {
			t.Errorf("replay %d status: got %d, want %d", i, got.status, first.status)
		}
		if !bytes.Equal(got.body, first.body) {
			t.Errorf("replay %d body: got %q, want %q", i, got.body, first.body)
		}
		if ct, want := got.header.Get("Content-Type"), first.header.Get("Content-Type"); ct != want {
			t.Errorf("replay %d Content-Type: got %q, want %q", i, ct, want)
		}
		if cl, want := got.header.Get("Content-Length"), first.header.Get("Content-Length"); cl != want {
			t.Errorf("replay %d Content-Length: got %q, want %q", i, cl, want)
		}
		if v := got.header.Get(idem.ReplayedHeader); v != "true" {
			t.Errorf("replay %d %s: got %q, want %q", i, idem.ReplayedHeader, v, "true")
		}
		for _, h := range []string{"Set-Cookie", "X-Custom"} {
			if v := got.header.Values(h); len(v) != 0 {
				t.Errorf("replay %d %s: got %q, want none", i, h, v)
			}
		}
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestReplayWithoutContentType: a handler that sets no Content-Type gets none
// stored, and the replay is byte-identical all the same.
func TestReplayWithoutContentType(t *testing.T) {
	o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "accepted %d", n)
	}}
	e := newEnv(t, envConfig{}, o)
	first := e.do(t, http.MethodPost, "/orders", "", "k")
	again := e.do(t, http.MethodPost, "/orders", "", "k")
	if again.status != first.status || !bytes.Equal(again.body, first.body) || !again.replayed() {
		t.Errorf("replay: got %s replayed=%v, want %s replayed", again, again.replayed(), first)
	}
	if ct, want := again.header.Get("Content-Type"), first.header.Get("Content-Type"); ct != want {
		t.Errorf("replay Content-Type: got %q, want %q", ct, want)
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1", got)
	}
}

// TestHandlerSeesBody: the middleware reads the body to digest it and must
// hand the handler every byte.
func TestHandlerSeesBody(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{}, o)
	body := strings.Repeat("0123456789", 1000)
	got := e.do(t, http.MethodPost, "/orders", body, "k")
	if want := fmt.Sprintf(`"body":%q`, body); !bytes.Contains(got.body, []byte(want)) {
		t.Errorf("handler's echo: got %d bytes without the request body, want it echoed", len(got.body))
	}
}

// TestReusedKey: the digest is a column beside the stored response, so a key
// reused for another request is found and refused. A digest folded into the
// lookup key would miss instead and run the handler again.
func TestReusedKey(t *testing.T) {
	const path, body = "/orders?sku=1", `{"qty":2}`
	tests := []struct {
		name, method, path, body string
	}{
		{"different body", http.MethodPost, path, `{"qty":3}`},
		{"empty body", http.MethodPost, path, ""},
		{"different path", http.MethodPost, "/refunds?sku=1", body},
		{"different query", http.MethodPost, "/orders?sku=2", body},
		{"query dropped", http.MethodPost, "/orders", body},
		{"different method", http.MethodPatch, path, body},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{}, o)
			first := e.do(t, http.MethodPost, path, body, "k")

			got := e.do(t, tc.method, tc.path, tc.body, "k")
			wantProblem(t, got, http.StatusUnprocessableEntity, idem.ProblemKeyReused)
			if n := o.calls.Load(); n != 1 {
				t.Errorf("handler calls: got %d, want 1", n)
			}

			again := e.do(t, http.MethodPost, path, body, "k")
			if again.status != first.status || !bytes.Equal(again.body, first.body) || !again.replayed() {
				t.Errorf("original after the refusal: got %s replayed=%v, want %s replayed", again, again.replayed(), first)
			}
		})
	}
}

// TestMaxBody: an oversized body is refused before anything is reserved, so
// the key is still free for a request that fits.
func TestMaxBody(t *testing.T) {
	tests := []struct {
		name    string
		maxBody int64
		size    int
	}{
		{"over a set cap", 16, 17},
		{"far over a set cap", 16, 64 << 10},
		{"over the default cap", 0, idem.DefaultMaxBody + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{MaxBody: tc.maxBody}}, o)

			got := e.do(t, http.MethodPost, "/orders", strings.Repeat("x", tc.size), "k")
			wantProblem(t, got, http.StatusRequestEntityTooLarge, idem.ProblemBodyTooLarge)
			if n := o.calls.Load(); n != 0 {
				t.Errorf("handler calls after 413: got %d, want 0", n)
			}
			if n := e.rows(t); n != 0 {
				t.Errorf("stored responses after 413: got %d, want 0", n)
			}

			small := e.do(t, http.MethodPost, "/orders", "small", "k")
			if small.status != http.StatusCreated || small.replayed() {
				t.Errorf("same key, small body: got %s replayed=%v, want a fresh 201", small, small.replayed())
			}
			if n := o.calls.Load(); n != 1 {
				t.Errorf("handler calls: got %d, want 1", n)
			}
		})
	}
}

func TestMaxBodyExactlyFits(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{opt: idem.Options{MaxBody: 16}}, o)
	if got := e.do(t, http.MethodPost, "/orders", strings.Repeat("x", 16), "k"); got.status != http.StatusCreated {
		t.Errorf("16-byte body under a 16-byte cap: got %s, want 201", got)
	}
}

// TestWhatIsStored: a response the handler completed below 500 is stored and
// replayed; a 5xx or a panic is not, and the next request runs the handler.
func TestWhatIsStored(t *testing.T) {
	tests := []struct {
		name       string
		first      func(w http.ResponseWriter)
		wantFirst  int
		wantStored bool
	}{
		{"200", status(http.StatusOK), http.StatusOK, true},
		{"303", status(http.StatusSeeOther), http.StatusSeeOther, true},
		{"400", status(http.StatusBadRequest), http.StatusBadRequest, true},
		{"409", status(http.StatusConflict), http.StatusConflict, true},
		{"499", status(499), 499, true},
		{"implicit 200", func(w http.ResponseWriter) { w.Write([]byte("ok")) }, http.StatusOK, true},
		{"500", status(http.StatusInternalServerError), http.StatusInternalServerError, false},
		{"502", status(http.StatusBadGateway), http.StatusBadGateway, false},
		{"503", status(http.StatusServiceUnavailable), http.StatusServiceUnavailable, false},
		{"panic", func(http.ResponseWriter) { panic("boom") }, http.StatusInternalServerError, false},
		{"abort", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, http.StatusInternalServerError, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					tc.first(w)
					return
				}
				created(n, w, r)
			}}
			e := newEnv(t, envConfig{}, o)

			first := e.serve(keyed("one", "k"))
			if first.status != tc.wantFirst {
				t.Errorf("first: got %s, want %d", first, tc.wantFirst)
			}
			second := e.do(t, http.MethodPost, "/orders", "one", "k")
			wantCalls, wantStatus := int64(2), http.StatusCreated
			if tc.wantStored {
				wantCalls, wantStatus = 1, tc.wantFirst
			}
			if second.status != wantStatus || second.replayed() != tc.wantStored {
				t.Errorf("second: got %s replayed=%v, want %d replayed=%v",
					second, second.replayed(), wantStatus, tc.wantStored)
			}
			if got := o.calls.Load(); got != wantCalls {
				t.Errorf("handler calls: got %d, want %d", got, wantCalls)
			}
		})
	}
}

// TestEmptyBodyIsStored: a handler that completes with no body at all (a
// 204, a 201 with only a Location) has completed; its response is stored and
// replayed like any other, and the handler does not run again. A nil body
// bound as NULL into the NOT NULL body column once made the owner's client
// get 503 for a handler that had done its work, and the retry run it again.
func TestEmptyBodyIsStored(t *testing.T) {
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"204", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, http.StatusNoContent},
		{"201 with only a Location", func(w http.ResponseWriter) {
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(http.StatusCreated)
		}, http.StatusCreated},
		{"200 without a write", func(http.ResponseWriter) {}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &orders{fn: func(_ int64, w http.ResponseWriter, _ *http.Request) { tc.write(w) }}
			e := newEnv(t, envConfig{}, o)

			first := e.do(t, http.MethodPost, "/orders", "one", "k")
			if first.status != tc.want || len(first.body) != 0 {
				t.Errorf("first: got %s, want %d with no body", first, tc.want)
			}
			second := e.do(t, http.MethodPost, "/orders", "one", "k")
			if second.status != tc.want || len(second.body) != 0 || !second.replayed() {
				t.Errorf("second: got %s replayed=%v, want a replay of %d with no body", second, second.replayed(), tc.want)
			}
			if got := o.calls.Load(); got != 1 {
				t.Errorf("handler calls: got %d, want 1", got)
			}
		})
	}
}

func status(code int) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d", code)
	}
}

// TestPrincipal: keys are scoped by the principal, so the same key from two
// principals is two executions.
func TestPrincipal(t *testing.T) {
	tests := []struct {
		name       string
		first      [2]string // principal, key
		second     [2]string
		wantCalls  int64
		wantReplay bool
	}{
		{"same principal", [2]string{"alice", "k"}, [2]string{"alice", "k"}, 1, true},
		{"two principals", [2]string{"alice", "k"}, [2]string{"bob", "k"}, 2, false},
		{"no principal and a principal", [2]string{"", "k"}, [2]string{"alice", "k"}, 2, false},
		// Joined naively as principal:key both would read "a:b:c".
		{"separator in principal and key", [2]string{"a", "b:c"}, [2]string{"a:b", "c"}, 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{
				Principal: porch.KeyByHeader("X-Account"),
			}}, o)
			req := func(pk [2]string) result {
				r := keyed("one", pk[1])
				r.Header.Set("X-Account", pk[0])
				return e.serve(r)
			}
			first := req(tc.first)
			second := req(tc.second)
			if first.status != http.StatusCreated || second.status != http.StatusCreated {
				t.Errorf("statuses: got %d and %d, want 201 and 201", first.status, second.status)
			}
			if second.replayed() != tc.wantReplay {
				t.Errorf("second replayed: got %v, want %v", second.replayed(), tc.wantReplay)
			}
			if got := o.calls.Load(); got != tc.wantCalls {
				t.Errorf("handler calls: got %d, want %d", got, tc.wantCalls)
			}
			// Each principal still replays its own response.
			if again := req(tc.first); !bytes.Equal(again.body, first.body) {
				t.Errorf("first principal again: got %s, want %s", again, first)
			}
		})
	}
}

// A Principal that fails runs no handler and stores nothing: a 500 of its
// own type, while one that returns porch.ErrSkip serves the request
// without idempotency (every retry runs the handler).
func TestPrincipalErrorAndSkip(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{opt: idem.Options{
		Principal: func(r *http.Request) (string, error) {
			switch r.Header.Get("X-Account") {
			case "internal":
				return "", porch.ErrSkip
			case "broken":
				return "", errors.New("session store down")
			}
			return r.Header.Get("X-Account"), nil
		},
	}}, o)
	req := func(account string) result {
		r := keyed("one", "k")
		r.Header.Set("X-Account", account)
		return e.serve(r)
	}
	wantProblem(t, req("broken"), http.StatusInternalServerError, idem.ProblemPrincipalFailed)
	if got := o.calls.Load(); got != 0 {
		t.Fatalf("after a failing Principal: got %d handler calls, want 0", got)
	}
	for i := range 2 {
		if got := req("internal"); got.status != http.StatusCreated || got.replayed() {
			t.Fatalf("skipped request %d: got %d (replayed %v), want a fresh 201", i+1, got.status, got.replayed())
		}
	}
	if got := o.calls.Load(); got != 2 {
		t.Errorf("after two skipped requests with one key: got %d handler calls, want 2", got)
	}
}

// TestTTL drives the store's clock: a stored response replays until its TTL
// has passed, then the key runs again and its row is replaced.
func TestTTL(t *testing.T) {
	const ttl = time.Hour
	tests := []struct {
		name       string
		secondBody string
	}{
		{"same request", "one"},
		// An expired row's digest is not compared: no 422.
		{"different body", "two"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := porchtest.NewFakeClock(time.Date(2026, 8, 29, 12, 0, 0, 0, time.UTC))
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{TTL: ttl}, store: store.Options{Clock: fc}}, o)

			first := e.do(t, http.MethodPost, "/orders", "one", "k")
			fc.Advance(ttl - time.Millisecond)
			if got := e.do(t, http.MethodPost, "/orders", "one", "k"); !got.replayed() {
				t.Errorf("just before the TTL: got %s replayed=%v, want a replay", got, got.replayed())
			}

			fc.Advance(time.Millisecond)
			now := fc.Wall()
			second := e.do(t, http.MethodPost, "/orders", tc.secondBody, "k")
			if second.status != http.StatusCreated || second.replayed() || bytes.Equal(second.body, first.body) {
				t.Errorf("after the TTL: got %s replayed=%v, want a fresh 201", second, second.replayed())
			}
			if got := o.calls.Load(); got != 2 {
				t.Errorf("handler calls: got %d, want 2", got)
			}

			var n int
			var body []byte
			var createdAt, expiresAt int64
			err := e.store.DB().QueryRow(`SELECT count(*), body, created_at, expires_at FROM porch_idem_responses`).
				Scan(&n, &body, &createdAt, &expiresAt)
			if err != nil {
				t.Fatalf("read stored response: %v", err)
			}
			if n != 1 {
				t.Errorf("stored responses: got %d, want 1", n)
			}
			if !bytes.Equal(body, second.body) {
				t.Errorf("stored body: got %q, want the new response %q", body, second.body)
			}
			if want := now.UnixMilli(); createdAt != want {
				t.Errorf("created_at: got %d, want %d", createdAt, want)
			}
			if want := now.Add(ttl).UnixMilli(); expiresAt != want {
				t.Errorf("expires_at: got %d, want %d", expiresAt, want)
			}

			if got := e.do(t, http.MethodPost, "/orders", tc.secondBody, "k"); !bytes.Equal(got.body, second.body) || !got.replayed() {
				t.Errorf("replay of the new response: got %s replayed=%v, want %s replayed", got, got.replayed(), second)
			}
		})
	}
}

// TestDurableBeforeVisible: by the time the client has the owner's response,
// the row is committed. The store is slowed down so that a middleware that
// sent first and stored afterwards would lose this race every time.
func TestDurableBeforeVisible(t *testing.T) {
	o := new(orders)
	e := newEnv(t, envConfig{store: store.Options{CommitDelay: 50 * time.Millisecond}}, o)

	got := e.do(t, http.MethodPost, "/orders", "one", "k")
	var status int
	var contentType string
	var body, digest []byte
	err := e.store.DB().QueryRow(`SELECT status, content_type, body, digest FROM porch_idem_responses`).
		Scan(&status, &contentType, &body, &digest)
	if err != nil {
		t.Fatalf("read the stored response right after the client got it: %v", err)
	}
	if status != got.status || !bytes.Equal(body, got.body) || contentType != got.header.Get("Content-Type") {
		t.Errorf("stored: got %d %q %s, want what the client got: %d %q %s",
			status, contentType, body, got.status, got.header.Get("Content-Type"), got.body)
	}
	if len(digest) != 32 {
		t.Errorf("stored digest: got %d bytes, want a SHA-256 (32)", len(digest))
	}
}
