package idem

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A digest is stored beside each response and compared with its retries'
// for as long as the TTL, across upgrades: it must stay SHA-256 of method,
// NUL, request-URI, NUL, body, whether the framing is hashed on the stack
// (up to digestInline bytes) or streamed, and whether the request had no
// body at all. The handler still reads the body the digest read.
func TestDigestFraming(t *testing.T) {
	m := &Keys{opt: Options{MaxBody: DefaultMaxBody}}
	for _, n := range []int{0, 13, digestInline - len("POST/orders?x=1") - 2, digestInline - len("POST/orders?x=1") - 1, 4096} {
		body := strings.Repeat("b", n)
		for _, noBody := range []bool{false, true} {
			if noBody && n > 0 {
				continue
			}
			r := httptest.NewRequest(http.MethodPost, "/orders?x=1", strings.NewReader(body))
			if noBody {
				r.Body = http.NoBody
			}
			got, res := m.digest(r)
			if res != nil {
				t.Fatalf("body of %d bytes: refused %d", n, res.StatusCode())
			}
			want := sha256.Sum256([]byte("POST\x00/orders?x=1\x00" + body))
			if !bytes.Equal(got, want[:]) {
				t.Errorf("body of %d bytes (NoBody %v): digest %x, want %x", n, noBody, got, want)
			}
			if read := readAll(t, r); string(read) != body {
				t.Errorf("body of %d bytes: the handler read %d bytes", n, len(read))
			}
		}
	}
}

// Without Options.Fingerprint a JSON body's digest is the byte-exact
// SHA-256 followed by that of its canonical form, which decides nothing:
// a digest stored without the second hash (or with it) still matches a
// retry of the same bytes, and only the first hash tells requests apart.
func TestDigestJSONForm(t *testing.T) {
	m := &Keys{opt: Options{MaxBody: DefaultMaxBody}}
	digest := func(body string) []byte {
		got, res := m.digest(httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body)))
		if res != nil {
			t.Fatalf("body %q: refused %d", body, res.StatusCode())
		}
		return got
	}
	d := digest(`{"b":1,"a":2}`)
	exact := sha256.Sum256([]byte("POST\x00/orders\x00" + `{"b":1,"a":2}`))
	canon := sha256.Sum256([]byte("POST\x00/orders\x00" + `{"a":2,"b":1}`))
	if want := append(exact[:], canon[:]...); !bytes.Equal(d, want) {
		t.Fatalf("digest %x, want %x", d, want)
	}
	if !sameRequest(d, exact[:]) || !sameRequest(exact[:], d) {
		t.Errorf("a digest stored without the canonical hash does not match its retry")
	}
	other := digest(`{"a":2,"b":1}`)
	if sameRequest(d, other) || !sameJSON(d, other) {
		t.Errorf("reordered members: sameRequest %v (want false), sameJSON %v (want true)", sameRequest(d, other), sameJSON(d, other))
	}
	// The hint is paid on every keyed request, so it stops at 4 KiB: a
	// body of 4 KiB carries it, one byte more does not.
	for _, tt := range []struct {
		size int
		want int
	}{
		{4 << 10, 2 * digestSize},
		{4<<10 + 1, digestSize},
		{64 << 10, digestSize},
	} {
		body := `[` + strings.Repeat(`0,`, (tt.size-3)/2) + `0]`
		body += strings.Repeat(" ", tt.size-len(body))
		if got := digest(body); len(got) != tt.want {
			t.Errorf("a JSON body of %d bytes: digest of %d bytes, want %d", len(body), len(got), tt.want)
		}
	}
}
