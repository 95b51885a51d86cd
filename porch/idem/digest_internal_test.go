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
