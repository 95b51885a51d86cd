package idem_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/idem"
)

// A key reused with a body that differs from the first only in how its JSON
// is written is still 422 under the default, byte-exact fingerprint, but
// the problem's detail names FingerprintJSON, the option that would have
// replayed it. A body that differs in value, or is not JSON, gets no hint;
// with FingerprintJSON the re-encoded body replays.
func TestReusedKeyHintsFingerprintJSON(t *testing.T) {
	const first = `{"sku":"mug","qty":2}`
	tests := []struct {
		name   string
		opt    idem.Options
		first  string
		retry  string
		status int
		hint   bool
	}{
		{"members reordered", idem.Options{}, first, `{"qty":2,"sku":"mug"}`, http.StatusUnprocessableEntity, true},
		{"whitespace and number form", idem.Options{}, first, "{ \"sku\": \"mug\",\n  \"qty\": 2.0 }", http.StatusUnprocessableEntity, true},
		{"another value", idem.Options{}, first, `{"qty":3,"sku":"mug"}`, http.StatusUnprocessableEntity, false},
		{"not JSON", idem.Options{}, "sku=mug&qty=2", "qty=2&sku=mug", http.StatusUnprocessableEntity, false},
		{"a JSON string", idem.Options{}, `"mug"`, ` "mug"`, http.StatusUnprocessableEntity, false},
		{"byte for byte", idem.Options{}, first, first, http.StatusCreated, false},
		{"FingerprintJSON replays", idem.Options{Fingerprint: idem.FingerprintJSON}, first, `{"qty":2,"sku":"mug"}`, http.StatusCreated, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{opt: tt.opt}, &orders{})
			if got := e.do(t, http.MethodPost, "/orders", tt.first, "k1"); got.status != http.StatusCreated {
				t.Fatalf("first request: got %s, want 201", got)
			}
			got := e.do(t, http.MethodPost, "/orders", tt.retry, "k1")
			if got.status != tt.status {
				t.Fatalf("retry: got %s, want %d", got, tt.status)
			}
			if got.status == http.StatusCreated {
				if !got.replayed() {
					t.Errorf("retry: got %s, want a replay", got)
				}
				return
			}
			wantProblem(t, got, http.StatusUnprocessableEntity, idem.ProblemKeyReused)
			if hint := strings.Contains(detail(t, got), "idem.FingerprintJSON"); hint != tt.hint {
				t.Errorf("detail %q: names FingerprintJSON %v, want %v", detail(t, got), hint, tt.hint)
			}
		})
	}
}

// The 422 for a duplicate parked past MaxWait behind a running owner gives
// the same hint.
func TestReusedKeyInFlightHintsFingerprintJSON(t *testing.T) {
	g := newGate()
	o := held(g)
	e := newEnv(t, envConfig{opt: idem.Options{MaxWait: 20 * time.Millisecond}}, o)
	t.Cleanup(g.open)

	owner := e.sendAll(t, 1, http.MethodPost, "/orders", same(`{"sku":"mug","qty":2}`), same("k"))
	g.waitEntered(t)
	got := e.do(t, http.MethodPost, "/orders", `{"qty":2,"sku":"mug"}`, "k")
	wantProblem(t, got, http.StatusUnprocessableEntity, idem.ProblemKeyReused)
	if d := detail(t, got); !strings.Contains(d, "idem.FingerprintJSON") {
		t.Errorf("detail %q: want it to name idem.FingerprintJSON", d)
	}
	g.open()
	if first := owner()[0]; first.status != http.StatusCreated {
		t.Errorf("owner: got %s, want 201", first)
	}
}

// detail is a problem's detail member.
func detail(t *testing.T, got result) string {
	t.Helper()
	var p struct{ Detail string }
	if err := json.Unmarshal(got.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", got.body, err)
	}
	return p.Detail
}
