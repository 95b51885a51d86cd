package idem

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// quote is the sf-string spelling of key.
func quote(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

// parseOne parses v sent as the only Idempotency-Key header.
func parseOne(v string) (string, error) {
	r := &http.Request{Header: http.Header{Header: {v}}}
	return parseKey(r, Header)
}

// FuzzParseKey checks what every accepted key is, that the raw and the
// sf-string spelling of a key mean the same key, and that only space and tab
// are trimmed around it.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"abc", `"abc"`, `"a\"b\\c"`, `a"b`, " \tabc\t ", "", `""`, `"`, `"abc`, `"a\nb"`,
		"8e03978e-40d5-43e8-bc93-6894a57f9324", strings.Repeat("k", MaxKeyLen), strings.Repeat("k", MaxKeyLen+1),
		"\u00a0abc", "abc\u0085", "\u3000abc\u3000", "\vabc",
		"a\x00b", "clé", `"abc";p=1`, `"abc", "def"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := parseOne(v)
		trimmed := strings.Trim(v, " \t")
		if err != nil {
			if !strings.HasPrefix(trimmed, `"`) {
				if len(trimmed) > 0 && len(trimmed) <= MaxKeyLen && printable(trimmed) {
					t.Fatalf("parseKey(%q): got %v, want the raw key %q", v, err, trimmed)
				}
			}
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLen || !printable(key) {
			t.Fatalf("parseKey(%q) = %q: want 1 to %d printable ASCII bytes", v, key, MaxKeyLen)
		}
		if !strings.HasPrefix(trimmed, `"`) && key != trimmed {
			t.Fatalf("parseKey(%q) = %q: want the raw value less only spaces and tabs, %q", v, key, trimmed)
		}
		if got, err := parseOne(quote(key)); err != nil || got != key {
			t.Fatalf("parseKey(%s) = %q, %v: want %q, the sf-string of a key is the same key", quote(key), got, err, key)
		}
		if !strings.HasPrefix(key, `"`) && key == strings.Trim(key, " \t") {
			if got, err := parseOne(key); err != nil || got != key {
				t.Fatalf("parseKey(%q) = %q, %v: want the raw key back", key, got, err)
			}
		}
	})
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// readRequest parses a request the way the server does, or returns nil
// for one net/http refuses: the digest only ever sees what it accepts.
func readRequest(method, uri string, body []byte) *http.Request {
	raw := method + " " + uri + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return nil
	}
	return r
}

// FuzzDigest checks the digest's framing, method NUL request-URI NUL body:
// two requests the server accepts get the same digest exactly when their
// method, request-URI and body are the same. The framing is unambiguous
// because net/http refuses a NUL in a method or a request target; were
// either to carry one, ("a\x00b", "c") and ("a", "b\x00c") would collide;
// without the NULs, ("/a", "b") and ("/ab", "") would.
func FuzzDigest(f *testing.F) {
	f.Add("POST", "/orders", []byte(`{"sku":"mug"}`), "POST", "/orders", []byte(`{"sku":"mug"}`))
	f.Add("POST", "/a", []byte("b"), "POST", "/ab", []byte(""))
	f.Add("POST", "/a?x=1", []byte(""), "POST", "/a", []byte("?x=1"))
	f.Add("PATCH", "/a", []byte("b"), "PATC", "H/a", []byte("b"))
	f.Add("POST", "/a%00b", []byte(""), "POST", "/a", []byte("\x00b"))
	f.Add("POST", "http://h/a", []byte(""), "POST", "/a", []byte(""))
	f.Add("POST", "*", []byte(""), "OPTIONS", "*", []byte(""))
	m := &Keys{opt: Options{MaxBody: DefaultMaxBody}}
	f.Fuzz(func(t *testing.T, m1, u1 string, b1 []byte, m2, u2 string, b2 []byte) {
		r1, r2 := readRequest(m1, u1, b1), readRequest(m2, u2, b2)
		if r1 == nil || r2 == nil {
			return
		}
		d1, res1 := m.digest(r1)
		d2, res2 := m.digest(r2)
		if res1 != nil || res2 != nil {
			return // a body over MaxBody
		}
		body1, body2 := readAll(t, r1), readAll(t, r2)
		for _, s := range []string{r1.Method, r1.URL.RequestURI(), r2.Method, r2.URL.RequestURI()} {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("a request the server accepts has a NUL in %q: the digest's framing is ambiguous", s)
			}
		}
		same := r1.Method == r2.Method && r1.URL.RequestURI() == r2.URL.RequestURI() && bytes.Equal(body1, body2)
		if bytes.Equal(d1, d2) != same {
			t.Fatalf("digest(%s %s %q) == digest(%s %s %q) is %v, want %v",
				r1.Method, r1.URL.RequestURI(), body1, r2.Method, r2.URL.RequestURI(), body2, bytes.Equal(d1, d2), same)
		}
	})
}

func readAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
