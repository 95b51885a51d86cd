package idem_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

func TestCanonicalJSONRefuses(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ``},
		{"only whitespace", " \n"},
		{"not JSON", `sku=tea`},
		{"truncated", `{"a":1`},
		{"trailing comma", `[1,]`},
		{"two values", `{} {}`},
		{"trailing garbage", `{}x`},
		{"duplicate member", `{"a":1,"a":2}`},
		{"duplicate member spelled differently", `{"a":1,"\u0061":1}`},
		{"invalid UTF-8", "\"caf\xe9\""},
		{"lone surrogate", `"\ud800"`},
		{"exponent beyond 32 bits", `1e4294967296`},
		{"adjusted exponent beyond 32 bits", `10e2147483647`},
		{"too deep", strings.Repeat("[", 10002) + strings.Repeat("]", 10002)},
		{"leading zero", `01`},
		{"NaN", `NaN`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := idem.CanonicalJSON([]byte(tc.in)); err == nil {
				t.Errorf("CanonicalJSON: got %q, want an error", got)
			}
			got, err := idem.FingerprintJSON([]byte(tc.in))
			if err != nil || !bytes.Equal(got, []byte(tc.in)) {
				t.Errorf("FingerprintJSON: got (%q, %v), want the body itself", got, err)
			}
		})
	}
}

// TestFingerprint sends a request, then its retry with another body under
// the same key.
func TestFingerprint(t *testing.T) {
	const first = `{"sku":"tea","qty":2,"tags":["a","b"]}`
	tests := []struct {
		name        string
		fp          func([]byte) ([]byte, error)
		body, retry string
		wantStatus  int    // the retry's
		wantType    string // when refused
	}{
		{"default is byte-exact", nil, first, `{"qty":2,"sku":"tea","tags":["a","b"]}`,
			http.StatusUnprocessableEntity, idem.ProblemKeyReused},
		{"JSON: re-encoded replays", idem.FingerprintJSON, first, "{ \"qty\": 2.0, \"tags\": [\"a\", \"b\"],\n \"sku\": \"t\\u0065a\" }",
			http.StatusCreated, ""},
		{"JSON: array order matters", idem.FingerprintJSON, first, `{"qty":2,"sku":"tea","tags":["b","a"]}`,
			http.StatusUnprocessableEntity, idem.ProblemKeyReused},
		{"JSON: a value matters", idem.FingerprintJSON, first, `{"qty":3,"sku":"tea","tags":["a","b"]}`,
			http.StatusUnprocessableEntity, idem.ProblemKeyReused},
		{"JSON: not JSON is byte-exact, same bytes", idem.FingerprintJSON, "sku=tea", "sku=tea",
			http.StatusCreated, ""},
		{"JSON: not JSON is byte-exact, other bytes", idem.FingerprintJSON, "sku=tea", "sku=tea ",
			http.StatusUnprocessableEntity, idem.ProblemKeyReused},
		{"strict: not JSON is 400", idem.CanonicalJSON, first, `{"sku":"tea"`,
			http.StatusBadRequest, idem.ProblemBodyInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{Fingerprint: tc.fp}}, o)
			one := e.do(t, http.MethodPost, "/orders", tc.body, "k")
			if one.status != http.StatusCreated {
				t.Fatalf("first: got %s, want 201", one)
			}
			two := e.do(t, http.MethodPost, "/orders", tc.retry, "k")
			if tc.wantType != "" {
				wantProblem(t, two, tc.wantStatus, tc.wantType)
			} else if two.status != tc.wantStatus || !two.replayed() || !bytes.Equal(two.body, one.body) {
				t.Errorf("retry: got %s replayed=%v, want a replay of %s", two, two.replayed(), one)
			}
			if got := o.calls.Load(); got != 1 {
				t.Errorf("handler calls: got %d, want 1", got)
			}
		})
	}
}
