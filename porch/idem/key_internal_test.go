package idem

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestParseKey checks the reason behind each refusal, which the HTTP tests
// see only as one problem type.
func TestParseKey(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
		want    string
		wantErr error
	}{
		{"raw", []string{"abc"}, "abc", nil},
		{"sf-string", []string{`"abc"`}, "abc", nil},
		{"escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"quote inside raw", []string{`a"b`}, `a"b`, nil},
		{"255 bytes", []string{strings.Repeat("k", MaxKeyLen)}, strings.Repeat("k", MaxKeyLen), nil},
		{"OWS trimmed", []string{" \t abc \t "}, "abc", nil},
		{"OWS around sf-string", []string{"\t\"abc\" "}, "abc", nil},
		{"NBSP around", []string{"\u00a0abc\u00a0"}, "", errKeyChars},
		{"NEL after", []string{"abc\u0085"}, "", errKeyChars},
		{"ideographic space before", []string{"\u3000abc"}, "", errKeyChars},
		{"vertical tab before", []string{"\vabc"}, "", errKeyChars},
		{"NBSP around sf-string", []string{"\u00a0\"abc\""}, "", errKeyChars},
		{"missing", nil, "", errKeyMissing},
		{"repeated", []string{"a", "a"}, "", errKeyRepeated},
		{"empty", []string{""}, "", errKeyEmpty},
		{"empty sf-string", []string{`""`}, "", errKeyEmpty},
		{"256 bytes", []string{strings.Repeat("k", MaxKeyLen+1)}, "", errKeyLong},
		{"256 bytes inside quotes", []string{`"` + strings.Repeat("k", MaxKeyLen+1) + `"`}, "", errKeyLong},
		{"control", []string{"a\x01"}, "", errKeyChars},
		{"DEL", []string{"a\x7f"}, "", errKeyChars},
		{"non-ASCII", []string{"é"}, "", errKeyChars},
		{"control quoted", []string{"\"a\x01\""}, "", errKeyChars},
		{"non-ASCII quoted", []string{`"é"`}, "", errKeyChars},
		{"unterminated", []string{`"abc`}, "", errKeyQuoted},
		{"lone quote", []string{`"`}, "", errKeyQuoted},
		{"inner quote", []string{`"a"b"`}, "", errKeyQuoted},
		{"bad escape", []string{`"a\b"`}, "", errKeyQuoted},
		{"dangling escape", []string{`"a\"`}, "", errKeyQuoted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for _, h := range tc.headers {
				r.Header.Add(Header, h)
			}
			got, err := parseKey(r, Header)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error: got %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("key: got %q, want %q", got, tc.want)
			}
		})
	}
}
