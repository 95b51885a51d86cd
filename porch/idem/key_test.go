package idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// keyed builds a POST carrying each of keys as one Idempotency-Key header,
// byte for byte: no client sits in between to refuse control characters.
func keyed(body string, keys ...string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	// The client the env's server sees (e.do): keys without a principal are
	// scoped by the client's address, and a test mixing the two means one
	// client.
	req.RemoteAddr = "127.0.0.1:1"
	for _, k := range keys {
		req.Header.Add(idem.Header, k)
	}
	return req
}

func TestKeyAccepted(t *testing.T) {
	long := strings.Repeat("k", idem.MaxKeyLen)
	tests := []struct {
		name string
		sent string // the header as sent first
		same string // a spelling of the same key: the second request replays
	}{
		{"raw", "abc", "abc"},
		{"sf-string equals raw", `"abc"`, "abc"},
		{"raw equals sf-string", "abc", `"abc"`},
		{"escaped quote", `"a\"b"`, `a"b`},
		{"escaped backslash", `"a\\b"`, `a\b`},
		{"uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"printable punctuation", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}"},
		{"inner space", "a b", `"a b"`},
		{"surrounding spaces and tabs trimmed", "  abc\t", "abc"},
		{"255 bytes", long, long},
		{"255 bytes quoted", `"` + long + `"`, long},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{RequireKey: true}}, o)

			first := e.serve(keyed("one", tc.sent))
			if first.status != http.StatusCreated {
				t.Fatalf("first: got %s, want 201", first)
			}
			second := e.serve(keyed("one", tc.same))
			if second.status != http.StatusCreated || !second.replayed() {
				t.Errorf("second (%q): got %s replayed=%v, want a 201 replay", tc.same, second, second.replayed())
			}
			if got := o.calls.Load(); got != 1 {
				t.Errorf("handler calls: got %d, want 1", got)
			}
		})
	}
}

func TestKeyRefused(t *testing.T) {
	tests := []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"blank", []string{"   "}},
		{"empty sf-string", []string{`""`}},
		{"256 bytes", []string{strings.Repeat("k", idem.MaxKeyLen+1)}},
		{"256 bytes quoted", []string{`"` + strings.Repeat("k", idem.MaxKeyLen+1) + `"`}},
		{"NUL", []string{"a\x00b"}},
		{"control character", []string{"a\x01b"}},
		{"tab inside", []string{"a\tb"}},
		{"DEL", []string{"a\x7fb"}},
		{"control character quoted", []string{"\"a\x1bb\""}},
		{"tab quoted", []string{"\"a\tb\""}},
		{"non-ASCII", []string{"clé"}},
		{"non-ASCII quoted", []string{`"ключ"`}},
		{"high byte", []string{"a\xffb"}},
		{"NBSP around", []string{"\u00a0abc\u00a0"}},
		{"NEL after", []string{"abc\u0085"}},
		{"ideographic space before", []string{"\u3000abc"}},
		{"two headers, same key", []string{"abc", "abc"}},
		{"two headers, different keys", []string{"abc", "def"}},
		{"unterminated quote", []string{`"abc`}},
		{"lone quote", []string{`"`}},
		{"unescaped inner quote", []string{`"a"b"`}},
		{"unknown escape", []string{`"a\nb"`}},
		{"trailing backslash", []string{`"abc\"`}},
		{"sf-string with parameters", []string{`"abc";p=1`}},
		{"sf list", []string{`"abc", "def"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			// Without RequireKey too: a key that is present but bad is
			// refused whether or not one is required.
			e := newEnv(t, envConfig{}, o)

			got := e.serve(keyed("one", tc.keys...))
			wantProblem(t, got, http.StatusBadRequest, idem.ProblemKeyInvalid)
			if n := o.calls.Load(); n != 0 {
				t.Errorf("handler calls: got %d, want 0", n)
			}
			if n := e.rows(t); n != 0 {
				t.Errorf("stored responses: got %d, want 0", n)
			}
		})
	}
}

// TestKeyRefusedOverNetwork sends the refusals a Go client can send through
// a real connection, so header parsing by net/http is part of the test.
func TestKeyRefusedOverNetwork(t *testing.T) {
	tests := []struct {
		name string
		keys []string
	}{
		{"256 bytes", []string{strings.Repeat("k", idem.MaxKeyLen+1)}},
		{"tab inside", []string{"a\tb"}},
		{"non-ASCII", []string{"clé"}},
		{"two headers", []string{"abc", "abc"}},
		{"malformed quoted", []string{`"abc`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := new(orders)
			e := newEnv(t, envConfig{opt: idem.Options{RequireKey: true}}, o)
			got := e.do(t, http.MethodPost, "/orders", "one", tc.keys...)
			wantProblem(t, got, http.StatusBadRequest, idem.ProblemKeyInvalid)
			if n := o.calls.Load(); n != 0 {
				t.Errorf("handler calls: got %d, want 0", n)
			}
		})
	}
}
